package agent_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/agent/protocol"
)

// reconnect gives f a new connection to c's side, as a restored sandbox
// gives: it returns the client's end of it.
func (f *fakeAgent) reconnect() io.ReadWriteCloser {
	toClientR, toClientW := io.Pipe()
	toAgentR, toAgentW := io.Pipe()
	old := f.w
	f.w, f.r = toClientW, toAgentR
	frames := make(chan protocol.Frame, 64)
	go func() {
		defer close(frames)
		for {
			fr, err := protocol.ReadFrame(toAgentR)
			if err != nil {
				return
			}
			frames <- fr
		}
	}()
	f.frames = frames
	_ = old.Close() // the checkpointed sandbox ends
	f.t.Cleanup(func() { _ = toClientW.Close() })
	return agent.NewConn(toClientR, toAgentW, func() error {
		_ = toClientR.Close()
		return toAgentW.Close()
	})
}

// holds has c hold its connection, f answering as the agent does.
func (f *fakeAgent) holds(c *agent.Client) {
	f.t.Helper()
	held := make(chan error, 1)
	go func() { held <- c.Hold(context.Background()) }()
	hold := f.next()
	if hold.Type != protocol.TypeHold {
		f.t.Fatalf("frame %v, want hold", hold.Type)
	}
	f.send(protocol.TypeHeld, hold.ID, nil)
	if err := <-held; err != nil {
		f.t.Fatal(err)
	}
}

// TestClientHoldResume: a held client writes nothing after Hold, survives
// the end of its connection, and goes on over a new one: Release is the
// first frame there, then what a session wrote meanwhile, and the
// session's output arrives as before.
func TestClientHoldResume(t *testing.T) {
	c, f := newFake(t)
	ctx := context.Background()
	var mu sync.Mutex
	var got strings.Builder
	started := make(chan sandbox.Session, 1)
	go func() {
		s, err := c.Session(ctx, sandbox.Command{Args: []string{"python3"}, Output: func(_ sandbox.Stream, b []byte) {
			mu.Lock()
			got.Write(b)
			mu.Unlock()
		}}, nil)
		if err != nil {
			t.Error(err)
		}
		started <- s
	}()
	exec := f.next()
	f.sendJSON(protocol.TypeStarted, exec.ID, protocol.Started{PID: 7})
	sess := <-started

	f.holds(c)
	wrote := make(chan error, 1)
	go func() { _, err := sess.Write([]byte("x = 41\n")); wrote <- err }()
	conn := f.reconnect()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() { resumed <- c.Resume(ctx, conn) }()
	rel := f.next()
	if rel.Type != protocol.TypeRelease {
		t.Fatalf("first frame on the new connection: %v, want release", rel.Type)
	}
	f.sendJSON(protocol.TypeReleased, rel.ID, protocol.Released{NextID: rel.ID + 1})
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	if in := f.next(); in.Type != protocol.TypeStdin || in.ID != exec.ID || string(in.Payload) != "x = 41\n" {
		t.Fatalf("after release: %v %d %q, want the session's input", in.Type, in.ID, in.Payload)
	}
	f.send(protocol.TypeStdout, exec.ID, []byte("42\n"))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		out := got.String()
		mu.Unlock()
		if out == "42\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session output %q", out)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatalf("client after resume: %v", err)
	}
}

// TestClientRelease: a new client of a restored agent releases it and
// numbers its requests past the ids the agent knows.
func TestClientRelease(t *testing.T) {
	c, f := newFake(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- c.Release(ctx) }()
	rel := f.next()
	if rel.Type != protocol.TypeRelease {
		t.Fatalf("frame %v, want release", rel.Type)
	}
	f.sendJSON(protocol.TypeReleased, rel.ID, protocol.Released{NextID: 500})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Ping(ctx) }()
	if p := f.next(); p.Type != protocol.TypePing || p.ID < 500 {
		t.Fatalf("next request %v id %d, want one numbered from 500", p.Type, p.ID)
	}
}

// TestClientHoldRefused: an agent that does not know Hold answers with an
// error; the client is not held and serves on.
func TestClientHoldRefused(t *testing.T) {
	c, f := newFake(t)
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { held <- c.Hold(ctx) }()
	hold := f.next()
	f.sendJSON(protocol.TypeError, hold.ID, protocol.Error{Message: "unsupported frame type hold"})
	if err := <-held; err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Fatalf("Hold = %v, want the agent's refusal", err)
	}
	pinged := make(chan error, 1)
	go func() { pinged <- c.Ping(ctx) }()
	p := f.next()
	f.send(protocol.TypePong, p.ID, nil)
	if err := <-pinged; err != nil {
		t.Fatalf("ping after a refused hold: %v", err)
	}
}

// TestClientAttach: a new client of a restored agent attaches to the
// tagged commands the agent lists in Released: output written since the
// restore and later reaches the session, input goes to the command's id,
// the offset is what the earlier host received; an unknown tag and a
// command that ended before the attach are sandbox.ErrNoSession.
func TestClientAttach(t *testing.T) {
	c, f := newFake(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- c.Release(ctx) }()
	rel := f.next()
	f.sendJSON(protocol.TypeReleased, rel.ID, protocol.Released{NextID: 500, Sessions: []protocol.Running{
		{ID: 7, PID: 70, Tag: "terminal:a", Sent: 12},
		{ID: 8, PID: 80, Tag: "terminal:b", Sent: 3},
	}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.send(protocol.TypeStdout, 7, []byte("before "))
	f.sendJSON(protocol.TypeExit, 8, protocol.Exit{})
	// A ping answered: the frames before it were read.
	pinged := make(chan error, 1)
	go func() { pinged <- c.Ping(ctx) }()
	p := f.next()
	f.send(protocol.TypePong, p.ID, nil)
	if err := <-pinged; err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got strings.Builder
	s, err := c.Session(ctx, sandbox.Command{Tag: "terminal:a", Attach: true, Output: func(_ sandbox.Stream, b []byte) {
		mu.Lock()
		got.Write(b)
		mu.Unlock()
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.PID() != 70 || s.Offset() != 12 {
		t.Fatalf("attached pid %d offset %d, want 70 and 12", s.PID(), s.Offset())
	}
	f.send(protocol.TypeStdout, 7, []byte("after"))
	go func() { _, _ = s.Write([]byte("x")) }()
	if in := f.next(); in.Type != protocol.TypeStdin || in.ID != 7 {
		t.Fatalf("input went as %v %d, want stdin of 7", in.Type, in.ID)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		out := got.String()
		mu.Unlock()
		if out == "before after" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attached output %q", out)
		}
	}
	for _, tag := range []string{"terminal:b", "terminal:c", "terminal:a"} {
		if _, err := c.Session(ctx, sandbox.Command{Tag: tag, Attach: true}, nil); !errors.Is(err, sandbox.ErrNoSession) {
			t.Fatalf("attach %s: %v, want ErrNoSession", tag, err)
		}
	}
	f.sendJSON(protocol.TypeExit, 7, protocol.Exit{ExitCode: 3})
	res, err := s.Wait(ctx)
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("wait: %v %v", res, err)
	}
}
