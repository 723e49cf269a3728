package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/agent/protocol"
)

// frames encodes frames for the seeds: type, id, payload.
func frames(fs ...protocol.Frame) []byte {
	var b []byte
	for _, f := range fs {
		b = protocol.AppendFrame(b, f.Type, f.ID, f.Payload)
	}
	return b
}

func js(v any) []byte { b, _ := json.Marshal(v); return b }

// FuzzClientFromAgent: whatever the sandbox's side of the agent connection
// sends (the agent runs beside the sandbox's code, which may take its
// place), the host's client neither panics, nor hangs, nor keeps more
// output than its cap. The host listens in the sandbox (id 1, as the
// product's API does) and runs a command (id 2); then the fuzzed bytes
// arrive and the connection ends.
func FuzzClientFromAgent(f *testing.F) {
	const exec, conn = 2, protocol.AgentIDBit | 7
	f.Add(frames(
		protocol.Frame{Type: protocol.TypeStarted, ID: exec, Payload: js(protocol.Started{PID: 42})},
		protocol.Frame{Type: protocol.TypeStdout, ID: exec, Payload: []byte("hello\n")},
		protocol.Frame{Type: protocol.TypeStderr, ID: exec, Payload: []byte("oops\n")},
		protocol.Frame{Type: protocol.TypeExit, ID: exec, Payload: js(protocol.Exit{ExitCode: 3, TimedOut: true})},
	))
	f.Add(frames(
		protocol.Frame{Type: protocol.TypeStreamOpened, ID: conn, Payload: js(protocol.Opened{Listener: 1, Addr: "127.0.0.1:5"})},
		protocol.Frame{Type: protocol.TypeStreamData, ID: conn, Payload: []byte("GET / HTTP/1.1\r\n\r\n")},
		protocol.Frame{Type: protocol.TypeStreamClose, ID: conn},
		protocol.Frame{Type: protocol.TypeStreamData, ID: conn, Payload: []byte("late")},
		protocol.Frame{Type: protocol.TypeError, ID: exec, Payload: []byte(`{"message":"no such file"}`)},
		protocol.Frame{Type: protocol.TypeExit, ID: exec, Payload: []byte(`{`)},
	))
	f.Add(frames(
		protocol.Frame{Type: protocol.TypeExit, ID: exec, Payload: []byte(`not json`)},
		protocol.Frame{Type: protocol.TypeExit, ID: exec},
		protocol.Frame{Type: protocol.TypeStarted, ID: exec},
		protocol.Frame{Type: protocol.TypePong, ID: 99},
		protocol.Frame{Type: protocol.TypeStreamOpened, ID: 1, Payload: js(protocol.Opened{Addr: "again"})},
		protocol.Frame{Type: protocol.TypeStreamOpened, ID: conn, Payload: js(protocol.Opened{Listener: 5})},
	))
	f.Add([]byte{0x21, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x23, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		host, sbx := net.Pipe()
		const limit = 64
		c := agent.NewClient(host, agent.WithMaxOutput(limit))
		defer c.Close()
		// The sandbox's side: answer the listen, take the exec, then send
		// the fuzzed bytes and hang up; what else the host sends is read
		// and dropped.
		go func() {
			defer sbx.Close()
			f, err := protocol.ReadFrame(sbx)
			if err != nil {
				return
			}
			if protocol.WriteFrame(sbx, protocol.TypeStreamOpened, f.ID, js(protocol.Opened{Addr: "127.0.0.1:8080"})) != nil {
				return
			}
			if _, err := protocol.ReadFrame(sbx); err != nil {
				return
			}
			go io.Copy(io.Discard, sbx)
			sbx.Write(data)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := c.Listen(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		go func() {
			for {
				nc, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					nc.SetDeadline(time.Now().Add(time.Second))
					nc.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
					io.Copy(io.Discard, nc)
					nc.Close()
				}()
			}
		}()
		res, err := c.Exec(ctx, sandbox.Command{Args: []string{"x"}})
		if ctx.Err() != nil {
			t.Fatalf("exec hung: %v", err)
		}
		if err == nil && (len(res.Stdout) > limit || len(res.Stderr) > limit+200) {
			t.Fatalf("output beyond the cap: %d/%d bytes", len(res.Stdout), len(res.Stderr))
		}
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the client did not see the connection end")
		}
		l.Close()
	})
}

// FuzzClientStreamFromAgent: the same for a streamed command (a terminal
// session, a file read), whose output keeps to flow control: whatever the
// agent sends, the client neither panics nor hangs, hands the callback
// only whole chunks of the command's own output in order, and acks no
// more than the callback took. The host starts the command (id 1); then
// the fuzzed bytes arrive and the connection ends.
func FuzzClientStreamFromAgent(f *testing.F) {
	const id = 1
	chunk := make([]byte, 1<<10) // small: the engine minimizes what it finds
	f.Add(frames(
		protocol.Frame{Type: protocol.TypeStarted, ID: id, Payload: js(protocol.Started{PID: 42, Window: protocol.OutputWindow})},
		protocol.Frame{Type: protocol.TypeStdout, ID: id, Payload: chunk},
		protocol.Frame{Type: protocol.TypeStdout, ID: id, Payload: chunk},
		protocol.Frame{Type: protocol.TypeStderr, ID: id, Payload: []byte("oops\n")},
		protocol.Frame{Type: protocol.TypeExit, ID: id, Payload: js(protocol.Exit{})},
	))
	f.Add(frames(
		protocol.Frame{Type: protocol.TypeStarted, ID: id, Payload: js(protocol.Started{PID: 42, Window: -5})},
		protocol.Frame{Type: protocol.TypeStdout, ID: id, Payload: []byte("x")},
		protocol.Frame{Type: protocol.TypeStarted, ID: id, Payload: js(protocol.Started{PID: 43, Window: 1})},
		protocol.Frame{Type: protocol.TypeStdout, ID: id + 1, Payload: []byte("not this one's")},
	))
	f.Add(frames(
		protocol.Frame{Type: protocol.TypeStarted, ID: id, Payload: []byte(`{"pid":1,"window":1e99}`)},
		protocol.Frame{Type: protocol.TypeExit, ID: id, Payload: []byte(`{`)},
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		host, sbx := net.Pipe()
		c := agent.NewClient(host)
		defer c.Close()
		acked := make(chan int, 1)
		go func() {
			defer sbx.Close()
			if _, err := protocol.ReadFrame(sbx); err != nil {
				return
			}
			total := make(chan int, 1)
			go func() {
				n := 0
				for {
					f, err := protocol.ReadFrame(sbx)
					if err != nil {
						total <- n
						return
					}
					var a protocol.Ack
					if f.Type == protocol.TypeOutputAck && protocol.Decode(f.Payload, &a) == nil {
						n += a.Bytes
					}
				}
			}()
			sbx.Write(data)
			sbx.Close()
			acked <- <-total
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var took int
		p, err := c.Start(ctx, sandbox.Command{Args: []string{"x"}, Output: func(_ sandbox.Stream, b []byte) { took += len(b) }}, agent.StartOptions{Stream: true})
		if ctx.Err() != nil {
			t.Fatalf("start hung: %v", err)
		}
		if err == nil {
			_, _ = p.Wait(ctx)
			if ctx.Err() != nil {
				t.Fatal("wait hung")
			}
		}
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the client did not see the connection end")
		}
		c.Close()
		if n := <-acked; err == nil && n > took {
			t.Fatalf("acked %d bytes, the callback took %d", n, took)
		}
	})
}
