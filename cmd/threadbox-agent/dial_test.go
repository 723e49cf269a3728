package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// dialHost is the host's side of a dialing agent run in the test process:
// its socket, and the connections the agent makes to it.
type dialHost struct {
	t     *testing.T
	ln    *net.UnixListener
	conns []net.Conn
}

// dialing starts a dialing agent in the test process and returns the host.
func dialing(t *testing.T) *dialHost {
	t.Helper()
	root := t.TempDir()
	sock := filepath.Join(root, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	must(t, err)
	cfg := config{
		workspace: filepath.Join(root, "ws"), outputs: filepath.Join(root, "out"), tmpRoot: filepath.Join(root, "tmp"),
		oomEvents: filepath.Join(root, "none"), grace: time.Second, drain: time.Second, dial: sock,
	}
	must(t, os.MkdirAll(cfg.workspace, 0o755))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	rp := newReaper(log)
	go rp.loop(ctx)
	d := &dialer{cfg: cfg, reaper: rp, env: environ(os.Environ()), log: log}
	done := make(chan struct{})
	go func() { _ = d.loop(ctx); close(done) }()
	h := &dialHost{t: t, ln: ln}
	t.Cleanup(func() {
		cancel()
		ln.Close()
		for _, c := range h.conns {
			c.Close()
		}
		<-done
		if srv := d.current(); srv != nil {
			srv.killAll()
			srv.drain(5*time.Second, false)
		}
	})
	return h
}

// accept takes the agent's next connection and returns its frames.
func (h *dialHost) accept() (net.Conn, <-chan protocol.Frame) {
	h.t.Helper()
	must(h.t, h.ln.SetDeadline(time.Now().Add(10*time.Second)))
	c, err := h.ln.Accept()
	must(h.t, err)
	h.conns = append(h.conns, c)
	return c, readFrames(c)
}

// TestDialKeepsSessions: when the host's connection ends, the agent kills
// the commands it started but keeps its tagged sessions. The next host's
// Release names them with the output sent so far, output they wrote in
// between reaches that host after it, and they answer its input; nothing
// of the killed command reaches it.
func TestDialKeepsSessions(t *testing.T) {
	h := dialing(t)
	conn, frames := h.accept()
	send := func(c net.Conn, ty protocol.Type, id uint32, payload string) {
		t.Helper()
		must(t, protocol.WriteFrame(c, ty, id, []byte(payload)))
	}
	// A session that writes once, again while no host is connected, then
	// answers each line; and an untagged command that would run on.
	send(conn, protocol.TypeExec, 3, `{"args":["sh","-c","printf first; sleep 0.5; printf late; while read l; do echo got $l; done"],"open_stdin":true,"tag":"terminal:a"}`)
	send(conn, protocol.TypeExec, 4, `{"args":["sleep","60"]}`)
	pids := map[uint32]int{}
	for first := false; !first || len(pids) < 2; {
		switch f := next(t, frames); {
		case f.Type == protocol.TypeStarted:
			var s protocol.Started
			must(t, protocol.Decode(f.Payload, &s))
			pids[f.ID] = s.PID
		case f.Type == protocol.TypeStdout && f.ID == 3:
			if string(f.Payload) != "first" {
				t.Fatalf("the session's first output: %q", f.Payload)
			}
			first = true
		}
	}
	sessionPid, sleepPid := pids[3], pids[4]
	conn.Close()

	conn2, frames2 := h.accept()
	time.Sleep(time.Second) // the session writes "late" while this host has not released it
	send(conn2, protocol.TypeRelease, 1, "")
	f := next(t, frames2)
	if f.Type != protocol.TypeReleased || f.ID != 1 {
		t.Fatalf("first frame on the new connection: %v %d %q, want Released", f.Type, f.ID, f.Payload)
	}
	var r protocol.Released
	must(t, protocol.Decode(f.Payload, &r))
	want := protocol.Running{ID: 3, PID: sessionPid, Tag: "terminal:a", Sent: int64(len("first"))}
	if len(r.Sessions) != 1 || r.Sessions[0] != want || r.NextID != 5 {
		t.Fatalf("released %+v, want the session %+v and next id 5", r, want)
	}
	if err := syscall.Kill(sleepPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the untagged command of the old connection is still there: %v", err)
	}
	if f := next(t, frames2); f.Type != protocol.TypeStdout || f.ID != 3 || string(f.Payload) != "late" {
		t.Fatalf("after the release: %v %d %q, want the output written in between", f.Type, f.ID, f.Payload)
	}
	send(conn2, protocol.TypeStdin, 3, "x\n")
	if f := next(t, frames2); f.Type != protocol.TypeStdout || f.ID != 3 || string(f.Payload) != "got x\n" {
		t.Fatalf("the session on the new connection: %v %d %q", f.Type, f.ID, f.Payload)
	}
	send(conn2, protocol.TypeCloseStdin, 3, "")
	for {
		f := next(t, frames2)
		if f.ID == 4 {
			t.Fatalf("a frame of the old connection's command reached the new host: %v", f.Type)
		}
		if f.Type == protocol.TypeExit && f.ID == 3 {
			break
		}
	}
}

// TestDialWithoutSessions: with no tagged session kept, the next host is
// served at once, without a Release.
func TestDialWithoutSessions(t *testing.T) {
	h := dialing(t)
	conn, frames := h.accept()
	must(t, protocol.WriteFrame(conn, protocol.TypeExec, 3, []byte(`{"args":["sleep","60"]}`)))
	for f := next(t, frames); f.Type != protocol.TypeStarted; f = next(t, frames) {
	}
	conn.Close()
	conn2, frames2 := h.accept()
	must(t, protocol.WriteFrame(conn2, protocol.TypePing, 1, []byte("hi")))
	if f := next(t, frames2); f.Type != protocol.TypePong || f.ID != 1 {
		t.Fatalf("ping on the new connection: %v %d", f.Type, f.ID)
	}
}

// TestNextRedial: the dialer backs off from 5 ms to 250 ms while its host
// has been away for less than 30 s (a restart, which adopts the sandbox
// again), and to 1 s after (a host stopped without its sandboxes), which a
// host adopting sandboxes still finds within its 3 s wait.
func TestNextRedial(t *testing.T) {
	for _, tc := range []struct {
		wait, away, want time.Duration
	}{
		{minRedial, 0, 10 * time.Millisecond},
		{160 * time.Millisecond, time.Second, maxRedial},
		{maxRedial, 29 * time.Second, maxRedial},
		{maxRedial, awayRedial, 500 * time.Millisecond},
		{500 * time.Millisecond, time.Minute, awayMaxRedial},
		{awayMaxRedial, time.Hour, awayMaxRedial},
	} {
		if got := nextRedial(tc.wait, tc.away); got != tc.want {
			t.Errorf("nextRedial(%v, away %v) = %v, want %v", tc.wait, tc.away, got, tc.want)
		}
	}
}
