package agent_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
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

// TestClientOutputFlowControl: a streamed command asks for flow control,
// and the client gives the window back as its Output callback takes the
// output, only to an agent that said it keeps to it; an agent that sends
// far past the window gets its command killed; a capped command asks for
// none.
func TestClientOutputFlowControl(t *testing.T) {
	chunk := make([]byte, protocol.MaxChunk)
	start := func(t *testing.T, c *agent.Client, cmd sandbox.Command, stream bool) <-chan *agent.Process {
		started := make(chan *agent.Process, 1)
		go func() {
			p, err := c.Start(context.Background(), cmd, agent.StartOptions{Stream: stream})
			if err != nil {
				t.Error(err)
			}
			started <- p
		}()
		return started
	}
	execWindow := func(t *testing.T, fr protocol.Frame) int {
		var req protocol.Exec
		if fr.Type != protocol.TypeExec || protocol.Decode(fr.Payload, &req) != nil {
			t.Fatalf("got %v, want exec", fr.Type)
		}
		return req.Window
	}
	// acked reads the client's frames until a ping's answer and sums the
	// acks of id among them.
	acked := func(t *testing.T, c *agent.Client, f *fakeAgent, id uint32) (total int, others []protocol.Type) {
		pinged := make(chan error, 1)
		go func() { pinged <- c.Ping(context.Background()) }()
		for {
			fr := f.next()
			switch {
			case fr.Type == protocol.TypePing:
				f.send(protocol.TypePong, fr.ID, nil)
				if err := <-pinged; err != nil {
					t.Fatal(err)
				}
				return total, others
			case fr.Type == protocol.TypeOutputAck && fr.ID == id:
				var a protocol.Ack
				if err := protocol.Decode(fr.Payload, &a); err != nil {
					t.Fatal(err)
				}
				total += a.Bytes
			default:
				others = append(others, fr.Type)
			}
		}
	}

	// ackedUntil adds the client's acks of id to *total until enough says
	// so: the callback counts its bytes before their ack is sent, so an
	// ack can follow the count by a moment. It fails after five seconds,
	// or once more than the limit taken is acked.
	ackedUntil := func(t *testing.T, c *agent.Client, f *fakeAgent, id uint32, total *int, limit int, enough func(int) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			n, _ := acked(t, c, f, id)
			*total += n
			if *total > limit {
				t.Fatalf("acked %d bytes, more than the %d taken", *total, limit)
			}
			if enough(*total) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("acked %d of %d bytes", *total, limit)
			}
		}
	}

	t.Run("acks what the callback took", func(t *testing.T) {
		c, f := newFake(t)
		var mu sync.Mutex
		took := 0
		started := start(t, c, sandbox.Command{Args: []string{"x"}, Output: func(_ sandbox.Stream, b []byte) {
			mu.Lock()
			took += len(b)
			mu.Unlock()
		}}, true)
		fr := f.next()
		if w := execWindow(t, fr); w != protocol.OutputWindow {
			t.Fatalf("a streamed command asked for window %d, want %d", w, protocol.OutputWindow)
		}
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 1, Window: protocol.OutputWindow})
		<-started
		const n = 40 // 1.25 MiB: five windows
		// The fake keeps to the window, as the agent does: it sends no
		// more than the window ahead of the acks it read. (Sent all at
		// once, the output ran more than the client's queue ahead of a
		// callback slowed by a loaded machine, which the client rightly
		// took for an agent ignoring the window.)
		sent, total := 0, 0
		for range n {
			for sent-total+len(chunk) > protocol.OutputWindow {
				a := f.next()
				if a.Type != protocol.TypeOutputAck || a.ID != fr.ID {
					t.Fatalf("while the window was full the client sent %s %d", a.Type, a.ID)
				}
				var ack protocol.Ack
				if err := protocol.Decode(a.Payload, &ack); err != nil {
					t.Fatal(err)
				}
				total += ack.Bytes
			}
			f.send(protocol.TypeStdout, fr.ID, chunk)
			sent += len(chunk)
		}
		// Acks follow delivery; wait until all is delivered, then count.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			done := took == n*len(chunk)
			mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("took %d bytes, want %d", took, n*len(chunk))
			}
		}
		// Acks go in quarters of the window; what is left under a quarter
		// waits for more output.
		ackedUntil(t, c, f, fr.ID, &total, n*len(chunk), func(total int) bool { return n*len(chunk)-total < protocol.OutputWindow/4 })
		f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{})
	})

	t.Run("acks keep to the window the agent granted", func(t *testing.T) {
		// An agent that grants less than asked must get it back by quarters
		// of its own window, or it waits for ever after one window.
		c, f := newFake(t)
		var took atomic.Int64
		started := start(t, c, sandbox.Command{Args: []string{"x"}, Output: func(_ sandbox.Stream, b []byte) { took.Add(int64(len(b))) }}, true)
		fr := f.next()
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 1, Window: len(chunk)})
		<-started
		f.send(protocol.TypeStdout, fr.ID, chunk)
		for deadline := time.Now().Add(5 * time.Second); took.Load() < int64(len(chunk)); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("took %d bytes, want %d", took.Load(), len(chunk))
			}
		}
		// The whole window, taken, is given back.
		total := 0
		ackedUntil(t, c, f, fr.ID, &total, len(chunk), func(total int) bool { return total == len(chunk) })
		f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{})
	})

	t.Run("no acks to an agent without flow control", func(t *testing.T) {
		c, f := newFake(t)
		var took atomic.Int64
		started := start(t, c, sandbox.Command{Args: []string{"x"}, Output: func(_ sandbox.Stream, b []byte) { took.Add(int64(len(b))) }}, true)
		fr := f.next()
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 1})
		<-started
		for range 40 {
			f.send(protocol.TypeStdout, fr.ID, chunk)
		}
		// Everything was delivered before the acks are counted.
		for deadline := time.Now().Add(5 * time.Second); took.Load() < 40*int64(len(chunk)); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("took %d bytes, want %d", took.Load(), 40*len(chunk))
			}
		}
		if total, others := acked(t, c, f, fr.ID); total != 0 || len(others) != 0 {
			t.Fatalf("acked %d bytes, other frames %v, to an agent without flow control", total, others)
		}
		f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{})
	})

	t.Run("an agent past the window gets its command killed", func(t *testing.T) {
		c, f := newFake(t)
		gate := make(chan struct{})
		defer close(gate)
		started := start(t, c, sandbox.Command{Args: []string{"x"}, Output: func(sandbox.Stream, []byte) { <-gate }}, true)
		fr := f.next()
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 1, Window: protocol.OutputWindow})
		<-started
		// The callback holds the first chunk; four windows more are kept,
		// and the one past them is the agent's fault.
		for range 4*protocol.OutputWindow/len(chunk) + 2 {
			f.send(protocol.TypeStdout, fr.ID, chunk)
		}
		kill := f.next()
		var sig protocol.Signal
		if kill.Type != protocol.TypeSignal || kill.ID != fr.ID || protocol.Decode(kill.Payload, &sig) != nil || sig.Signal != 9 {
			t.Fatalf("got %v for %d, want SIGKILL for %d", kill.Type, kill.ID, fr.ID)
		}
		f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{ExitCode: -1, Signal: 9})
	})

	t.Run("an orphan's output is acked as it arrives, and not again once attached", func(t *testing.T) {
		c, f := newFake(t)
		done := make(chan error, 1)
		go func() { done <- c.Release(context.Background()) }()
		rel := f.next()
		f.sendJSON(protocol.TypeReleased, rel.ID, protocol.Released{NextID: 500, Sessions: []protocol.Running{
			{ID: 7, PID: 70, Tag: "terminal:a", Window: protocol.OutputWindow},
		}})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// Unattached, it runs on: three quarters of a window are acked at
		// once (the rest is under a quarter).
		for range 7 {
			f.send(protocol.TypeStdout, 7, chunk)
		}
		var total int
		for deadline := time.Now().Add(5 * time.Second); total < 3*protocol.OutputWindow/4; {
			n, _ := acked(t, c, f, 7)
			total += n
			if time.Now().After(deadline) {
				t.Fatalf("acked %d bytes of an orphan's %d", total, 7*len(chunk))
			}
		}
		var mu sync.Mutex
		took := 0
		s, err := c.Session(context.Background(), sandbox.Command{Tag: "terminal:a", Attach: true, Output: func(_ sandbox.Stream, b []byte) {
			mu.Lock()
			took += len(b)
			mu.Unlock()
		}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 9 {
			f.send(protocol.TypeStdout, 7, chunk)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			all := took == 16*len(chunk)
			mu.Unlock()
			if all {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("attached session took %d bytes, want %d", took, 16*len(chunk))
			}
		}
		// 16 chunks are 2 windows: all acked but for under a quarter, and
		// nothing twice.
		ackedUntil(t, c, f, 7, &total, 16*len(chunk), func(total int) bool { return 16*len(chunk)-total < protocol.OutputWindow/4 })
		f.sendJSON(protocol.TypeExit, 7, protocol.Exit{})
		if _, err := s.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a capped command asks for none", func(t *testing.T) {
		c, f := newFake(t)
		started := start(t, c, sandbox.Command{Args: []string{"x"}, Output: func(sandbox.Stream, []byte) {}}, false)
		fr := f.next()
		if w := execWindow(t, fr); w != 0 {
			t.Fatalf("a capped command asked for window %d", w)
		}
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 1})
		<-started
		f.sendJSON(protocol.TypeExit, fr.ID, protocol.Exit{})
	})
}

// TestExecOverrunFailsTheConnection: a command the agent does not end
// within its overrun past its timeout fails the connection (the sandbox
// is taken for hung) instead of waiting as long as the caller; one that
// ends late but within it, one without a timeout and one whose
// connection is held for a checkpoint are waited for.
func TestExecOverrunFailsTheConnection(t *testing.T) {
	const timeout, overrun = 100 * time.Millisecond, 300 * time.Millisecond
	type outcome struct {
		res sandbox.Result
		err error
	}
	exec := func(c *agent.Client, cmd sandbox.Command) <-chan outcome {
		done := make(chan outcome, 1)
		go func() {
			res, err := c.Exec(context.Background(), cmd)
			done <- outcome{res, err}
		}()
		return done
	}
	started := func(f *fakeAgent) uint32 {
		fr := f.next()
		if fr.Type != protocol.TypeExec {
			t.Fatalf("got %v, want exec", fr.Type)
		}
		f.sendJSON(protocol.TypeStarted, fr.ID, protocol.Started{PID: 1})
		return fr.ID
	}
	quiet := func(t *testing.T, c *agent.Client, done <-chan outcome, d time.Duration) {
		t.Helper()
		select {
		case o := <-done:
			t.Fatalf("Exec returned %+v (%v) while the command ran", o.res, o.err)
		case <-c.Done():
			t.Fatalf("connection failed: %v", c.Err())
		case <-time.After(d):
		}
	}

	t.Run("a command the agent never ends", func(t *testing.T) {
		c, f := newFake(t, agent.WithOverrun(overrun))
		done := exec(c, sandbox.Command{Args: []string{"x"}, Timeout: timeout})
		started(f)
		var o outcome
		select {
		case o = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Exec still waits 5 s after the command's timeout")
		}
		if !errors.Is(o.err, sandbox.ErrUnavailable) || !strings.Contains(o.err.Error(), "does not end it") {
			t.Fatalf("err = %v, want the sandbox taken for hung", o.err)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("the connection is still up")
		}
	})

	t.Run("a command that ends late within its overrun", func(t *testing.T) {
		c, f := newFake(t, agent.WithOverrun(overrun))
		done := exec(c, sandbox.Command{Args: []string{"x"}, Timeout: timeout})
		id := started(f)
		quiet(t, c, done, timeout+overrun/2)
		f.sendJSON(protocol.TypeExit, id, protocol.Exit{TimedOut: true})
		if o := <-done; o.err != nil || !o.res.TimedOut || o.res.ExitCode != 124 {
			t.Fatalf("result %+v (%v), want timed out", o.res, o.err)
		}
		// The watch ended with the command.
		time.Sleep(overrun)
		if err := c.Err(); err != nil {
			t.Fatalf("connection after the command ended: %v", err)
		}
	})

	t.Run("a command without a timeout", func(t *testing.T) {
		c, f := newFake(t, agent.WithOverrun(overrun))
		done := exec(c, sandbox.Command{Args: []string{"x"}})
		id := started(f)
		quiet(t, c, done, 3*overrun)
		f.sendJSON(protocol.TypeExit, id, protocol.Exit{})
		if o := <-done; o.err != nil {
			t.Fatal(o.err)
		}
	})

	t.Run("a connection held for a checkpoint", func(t *testing.T) {
		c, f := newFake(t, agent.WithOverrun(overrun))
		ctx := context.Background()
		done := exec(c, sandbox.Command{Args: []string{"x"}, Timeout: timeout})
		id := started(f)
		f.holds(c)
		conn := f.reconnect()
		quiet(t, c, done, timeout+3*overrun)
		resumed := make(chan error, 1)
		go func() { resumed <- c.Resume(ctx, conn) }()
		rel := f.next()
		f.sendJSON(protocol.TypeReleased, rel.ID, protocol.Released{NextID: rel.ID + 1})
		if err := <-resumed; err != nil {
			t.Fatal(err)
		}
		f.sendJSON(protocol.TypeExit, id, protocol.Exit{TimedOut: true})
		if o := <-done; o.err != nil {
			t.Fatal(o.err)
		}
	})

	t.Run("no bound", func(t *testing.T) {
		c, f := newFake(t, agent.WithOverrun(0))
		done := exec(c, sandbox.Command{Args: []string{"x"}, Timeout: timeout})
		id := started(f)
		quiet(t, c, done, timeout+3*overrun)
		f.sendJSON(protocol.TypeExit, id, protocol.Exit{TimedOut: true})
		if o := <-done; o.err != nil {
			t.Fatal(o.err)
		}
	})
}
