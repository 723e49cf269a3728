package agent_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/agent/protocol"
	"threadbox/infra/sandbox/sandboxtest"
)

// echoServe answers each line read from conn with "echo: " and the line.
func echoServe(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := io.WriteString(conn, "echo: "+line); err != nil {
			return
		}
	}
}

func TestListenCarriesConnections(t *testing.T) {
	ta := startAgent(t, nil)
	ctx := testCtx(t, 30*time.Second)
	l, err := ta.client.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("listener addr %q", addr)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go echoServe(c)
		}
	}()
	// Two clients inside the "sandbox" (here the agent's host) talk at once,
	// with a payload larger than one frame.
	big := strings.Repeat("x", 100_000)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			res, err := ta.client.Exec(ctx, sandbox.Command{Args: []string{"python3", "-c", `
import socket,sys
s=socket.create_connection(("127.0.0.1",int(sys.argv[1])))
f=s.makefile("rwb")
for msg in [b"hello\n", sys.argv[2].encode()+b"\n"]:
    f.write(msg); f.flush()
    sys.stdout.write(f.readline().decode()[:40]+"|")
`, strings.Split(addr, ":")[1], big[:1000*(i+1)]}})
			if err != nil {
				t.Error(err)
				return
			}
			want := "echo: hello\n|echo: " + big[:34] + "|"
			if string(res.Stdout) != want {
				t.Errorf("client %d: stdout %q stderr %q, want %q", i, res.Stdout, res.Stderr, want)
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The listener is gone inside: a new connection is refused.
	res, err := ta.client.Exec(ctx, sandbox.Command{Args: []string{"python3", "-c", `
import socket,sys
try:
    socket.create_connection(("127.0.0.1",int(sys.argv[1])),timeout=2); print("connected")
except OSError: print("refused")
`, strings.Split(addr, ":")[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "refused" {
		t.Fatalf("after Close: %q (stderr %q)", got, res.Stderr)
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	ta := startAgent(t, nil)
	ctx := testCtx(t, 10*time.Second)
	for _, addr := range []string{"0.0.0.0:0", "8.8.8.8:80", "nonsense"} {
		if l, err := ta.client.Listen(ctx, addr); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded", addr)
		}
	}
}

func TestListenerEndsWithConnection(t *testing.T) {
	ta := startAgent(t, nil)
	ctx := testCtx(t, 10*time.Second)
	l, err := ta.client.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = ta.client.Close()
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Accept returned a connection after the agent went away")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked after the agent connection closed")
	}
}

func TestStartStreamKeepsNoOutput(t *testing.T) {
	ta := startAgent(t, nil)
	ctx := testCtx(t, 30*time.Second)
	var mu sync.Mutex
	var got bytes.Buffer
	p, err := ta.client.Start(ctx, sandbox.Command{
		Args: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a"},
		Output: func(_ sandbox.Stream, b []byte) {
			mu.Lock()
			got.Write(b)
			mu.Unlock()
		},
	}, agent.StartOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Beyond the 1 MiB default cap, all of it reached the callback and
	// none was kept in the result.
	if got.Len() != 3000000 || len(res.Stdout) != 0 || res.StdoutTruncated {
		t.Fatalf("streamed %d bytes, result kept %d (truncated %v)", got.Len(), len(res.Stdout), res.StdoutTruncated)
	}
}

// TestStreamedOutputKeepsToWindow: while a streamed command's Output
// callback does not take its output, the agent stops reading it, so the
// command blocks on its full pipe instead of the host queueing what it
// prints; once the callback takes it again, all of it arrives, in order.
func TestStreamedOutputKeepsToWindow(t *testing.T) {
	ta := startAgent(t, nil)
	ctx := testCtx(t, 60*time.Second)
	marker := filepath.Join(ta.dirs.workspace, "printed")
	const size = 8 << 20 // far beyond the window and the pipe's buffer
	out := newGatedOutput()
	p, err := ta.client.Start(ctx, sandbox.Command{
		Args:   []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a && echo end && touch %s", size, marker)},
		Output: out.write,
	}, agent.StartOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	<-out.first
	// Without flow control the command prints its 8 MiB into the host's
	// queue in well under a second and ends.
	time.Sleep(time.Second)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command printed everything while its output was not taken")
	}
	select {
	case <-p.Done():
		t.Fatal("the command ended while its output was not taken")
	default:
	}
	close(out.gate)
	res, err := p.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v %v", res, err)
	}
	if got, want := out.String(), strings.Repeat("a", size)+"end\n"; got != want {
		t.Fatalf("streamed %d bytes, want %d in order", len(got), len(want))
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the command did not finish: %v", err)
	}
}

// TestStreamedOutputOutlivesTheDrainTime: a streamed command that ended
// while the rest of its output waited for the host to take it still has
// all of it delivered, however long the host takes: the agent's drain
// time is for output held open by a process that left the group, not for
// a slow host.
func TestStreamedOutputOutlivesTheDrainTime(t *testing.T) {
	ta := startAgent(t, []string{"THREADBOX_AGENT_DRAIN=100ms"})
	ctx := testCtx(t, 30*time.Second)
	// More than the window, less than the window and the pipe's buffer:
	// the command ends while the agent waits for acks.
	const size = protocol.OutputWindow + 40<<10
	out := newGatedOutput()
	p, err := ta.client.Start(ctx, sandbox.Command{
		Args:   []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' b", size)},
		Output: out.write,
	}, agent.StartOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // ten drain times
	close(out.gate)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != strings.Repeat("b", size) {
		t.Fatalf("streamed %d bytes, want %d", len(got), size)
	}
}

// gatedOutput is an Output callback that takes nothing until its gate is
// closed: a reader on the host that is behind. first is closed when the
// first chunk arrives.
type gatedOutput struct {
	sandboxtest.Output
	gate, first chan struct{}
	once        sync.Once
}

func newGatedOutput() *gatedOutput {
	return &gatedOutput{gate: make(chan struct{}), first: make(chan struct{})}
}

func (g *gatedOutput) write(s sandbox.Stream, b []byte) {
	g.once.Do(func() { close(g.first) })
	<-g.gate
	g.Write(s, b)
}
