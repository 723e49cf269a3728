package agent_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/agent/protocol"
)

// fakeAgent plays the agent's side of a connection in the test.
type fakeAgent struct {
	t      *testing.T
	frames chan protocol.Frame // frames from the client
	w      *io.PipeWriter      // to the client
	r      *io.PipeReader
}

func newFake(t *testing.T, opts ...agent.Option) (*agent.Client, *fakeAgent) {
	t.Helper()
	toClientR, toClientW := io.Pipe()
	toAgentR, toAgentW := io.Pipe()
	c := agent.NewClient(agent.NewConn(toClientR, toAgentW, func() error {
		_ = toClientR.Close()
		return toAgentW.Close()
	}), opts...)
	f := &fakeAgent{t: t, frames: make(chan protocol.Frame, 64), w: toClientW, r: toAgentR}
	go func() {
		defer close(f.frames)
		for {
			fr, err := protocol.ReadFrame(toAgentR)
			if err != nil {
				return
			}
			f.frames <- fr
		}
	}()
	t.Cleanup(func() { _ = c.Close(); _ = toClientW.Close() })
	return c, f
}

func (f *fakeAgent) next() protocol.Frame {
	f.t.Helper()
	select {
	case fr, ok := <-f.frames:
		if !ok {
			f.t.Fatal("client connection closed")
		}
		return fr
	case <-time.After(5 * time.Second):
		f.t.Fatal("no frame from the client")
	}
	return protocol.Frame{}
}

func (f *fakeAgent) send(ty protocol.Type, id uint32, payload []byte) {
	f.t.Helper()
	if err := protocol.WriteFrame(f.w, ty, id, payload); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeAgent) sendJSON(ty protocol.Type, id uint32, v any) {
	f.t.Helper()
	b, err := protocol.Encode(v)
	if err != nil {
		f.t.Fatal(err)
	}
	f.send(ty, id, b)
}

func TestClientRequestEncoding(t *testing.T) {
	c, f := newFake(t, agent.WithMaxOutput(4096))
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), sandbox.Command{
			Args: []string{"cat"}, Dir: "d", Env: []string{"A=1"}, Timeout: 1500 * time.Millisecond,
			OutputDir: true, Stdin: []byte(strings.Repeat("s", protocol.MaxChunk+10)),
		})
		done <- err
	}()
	fr := f.next()
	var req protocol.Exec
	if err := protocol.Decode(fr.Payload, &req); err != nil || fr.Type != protocol.TypeExec {
		t.Fatalf("first frame %v: %v", fr.Type, err)
	}
	if req.Dir != "d" || req.Env[0] != "A=1" || req.TimeoutMillis != 1500 || req.MaxOutput != 4096 ||
		!req.OutputDir || !req.OpenStdin || req.TTY != nil || req.Args[0] != "cat" {
		t.Fatalf("exec request %+v", req)
	}
	// Stdin arrives in chunks, then the close.
	if a, b := f.next(), f.next(); a.Type != protocol.TypeStdin || len(a.Payload) != protocol.MaxChunk || b.Type != protocol.TypeStdin || len(b.Payload) != 10 {
		t.Fatalf("stdin frames %v/%d %v/%d", a.Type, len(a.Payload), b.Type, len(b.Payload))
	}
	if cl := f.next(); cl.Type != protocol.TypeCloseStdin || cl.ID != fr.ID {
		t.Fatalf("got %v, want close-stdin", cl.Type)
	}
	f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestClientCapsMisbehavingAgent(t *testing.T) {
	c, f := newFake(t)
	type out struct {
		res sandbox.Result
		err error
	}
	done := make(chan out, 1)
	var streamed int
	go func() {
		res, err := c.Exec(context.Background(), sandbox.Command{Args: []string{"x"}, MaxOutput: 10,
			Output: func(_ sandbox.Stream, b []byte) { streamed += len(b) }})
		done <- out{res, err}
	}()
	fr := f.next()
	f.send(protocol.Type(0x7e), fr.ID, []byte("unknown frames are ignored"))
	f.send(protocol.TypeStdout, fr.ID, []byte("0123456"))
	f.send(protocol.TypeStdout, fr.ID, []byte("789abcdef")) // beyond the cap
	f.send(protocol.TypeExit, fr.ID+1000, []byte(`{}`))     // no such command
	f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{ExitCode: 2})
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if string(o.res.Stdout) != "0123456789...[truncated]" || !o.res.StdoutTruncated || o.res.ExitCode != 2 || streamed != 10 {
		t.Fatalf("result %+v streamed %d", o.res, streamed)
	}
}

// TestClientLossDuringDelivery: a connection that breaks before the Exit
// frame must fail Wait, also when Wait starts only after the output
// delivery has stopped.
func TestClientLossDuringDelivery(t *testing.T) {
	for range 30 {
		c, f := newFake(t)
		started := make(chan *agent.Process, 1)
		go func() {
			p, err := c.Start(context.Background(), sandbox.Command{Args: []string{"x"}, Output: func(sandbox.Stream, []byte) {}}, agent.StartOptions{})
			if err != nil {
				t.Error(err)
			}
			started <- p
		}()
		fr := f.next()
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 42})
		p := <-started
		if p == nil {
			t.FailNow()
		}
		if p.PID() != 42 {
			t.Fatalf("pid %d", p.PID())
		}
		f.send(protocol.TypeStdout, fr.ID, []byte("partial"))
		_ = f.w.CloseWithError(errors.New("sandbox killed"))
		<-c.Done()
		time.Sleep(5 * time.Millisecond) // let delivery stop
		if _, err := p.Wait(testCtx(t, 5*time.Second)); !errors.Is(err, sandbox.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
	}
}

func TestClientStartError(t *testing.T) {
	c, f := newFake(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Start(context.Background(), sandbox.Command{Args: []string{"nope"}}, agent.StartOptions{TTY: &agent.TTY{Rows: 5, Cols: 6}})
		done <- err
	}()
	fr := f.next()
	var req protocol.Exec
	if err := protocol.Decode(fr.Payload, &req); err != nil || req.TTY == nil || req.TTY.Rows != 5 || req.TTY.Cols != 6 || !req.OpenStdin {
		t.Fatalf("request %+v %v", req, err)
	}
	f.sendJSON(protocol.TypeError, fr.ID, protocol.Error{Message: "exec: not found"})
	if err := <-done; !errors.Is(err, agent.ErrStart) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestClientPingAndContext(t *testing.T) {
	c, f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// The fake never answers: Ping ends with ctx.
	if err := c.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if fr := f.next(); fr.Type != protocol.TypePing {
		t.Fatalf("got %v", fr.Type)
	}
	go func() {
		fr := f.next()
		f.send(protocol.TypePong, fr.ID, fr.Payload)
	}()
	if err := c.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v on a live connection", c.Err())
	}
}

// TestClientCPUTime checks that the Exit frame's cpu_ms becomes the
// result's CPUTime, and that an older agent's Exit frame without it gives
// zero.
func TestClientCPUTime(t *testing.T) {
	tests := []struct {
		name string
		exit string
		want time.Duration
	}{
		{"reported", `{"exit_code":0,"duration_ms":3000,"cpu_ms":2150}`, 2150 * time.Millisecond},
		{"older agent", `{"exit_code":0,"duration_ms":3000}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newFake(t)
			type out struct {
				res sandbox.Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := c.Exec(context.Background(), sandbox.Command{Args: []string{"x"}})
				done <- out{res, err}
			}()
			fr := f.next()
			f.send(protocol.TypeExit, fr.ID, []byte(tt.exit))
			o := <-done
			if o.err != nil || o.res.CPUTime != tt.want || o.res.ExitCode != 0 {
				t.Fatalf("result %+v (%v), want CPU time %v", o.res, o.err, tt.want)
			}
		})
	}
}
