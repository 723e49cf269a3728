package tools

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"threadbox/app/messages"
	"threadbox/domain/fault"
)

// TestWatchSession lists a running session, replays its output to two
// watchers that joined at different points, follows what typed input
// makes it write, and ends each watch with the session's exit, while the
// model's write_stdin cursor stays where the model left it.
func TestWatchSession(t *testing.T) {
	e, b := newTerminalExecutor(Config{})
	b.onStart = func(s *fakeSession) { s.emit("$ ") }
	b.onWrite = func(s *fakeSession, p []byte) {
		if bytes.Equal(p, []byte("exit\r")) {
			s.emit("bye\r\n")
			s.end(0, nil)
			return
		}
		s.emit(string(p) + "\r\nok\r\n$ ")
	}
	out := runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "bash -i", "grace_seconds": 0.05, "rows": 30, "cols": 100})
	sid := out["session_id"].(string)

	list := e.Sessions("c1")
	if len(list) != 1 || list[0].ID != sid || list[0].Command != "bash -i" || list[0].Status != "running" || list[0].Rows != 30 || list[0].Cols != 100 || list[0].Cursor != 2 || list[0].PID != 101 {
		t.Fatalf("sessions: %+v", list)
	}
	if got := e.Sessions("other"); len(got) != 0 {
		t.Fatalf("another container lists %+v", got)
	}

	type watcher struct {
		mu   sync.Mutex
		got  bytes.Buffer
		end  SessionInfo
		err  error
		done chan struct{}
	}
	watch := func(since int64) *watcher {
		w := &watcher{done: make(chan struct{})}
		go func() {
			defer close(w.done)
			w.end, w.err = e.Watch(context.Background(), "c1", sid, since, func(c Chunk) error {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.got.Write(c.Data)
				return nil
			})
		}()
		return w
	}
	text := func(w *watcher) string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.got.String()
	}
	from0, from2 := watch(0), watch(2)
	eventually(t, func() bool { return text(from0) == "$ " })
	if err := e.Input("c1", sid, []byte("ls")); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return text(from0) == "$ ls\r\nok\r\n$ " && text(from2) == "ls\r\nok\r\n$ " })
	if err := e.Input("c1", sid, []byte("exit\r")); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*watcher{from0, from2} {
		<-w.done
		if w.err != nil || w.end.Status != "exited" || w.end.ExitCode == nil || *w.end.ExitCode != 0 {
			t.Fatalf("watch ended with %+v, %v", w.end, w.err)
		}
	}
	if got := text(from0); got != "$ ls\r\nok\r\n$ bye\r\n" {
		t.Fatalf("replay and follow: %q", got)
	}
	if err := e.Input("c1", sid, []byte("x")); fault.KindOf(err) != fault.Conflict {
		t.Fatalf("input to an ended session: %v", err)
	}
	// The model reads everything after its own cursor (2): watching took
	// nothing from it.
	out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "", "since": 2, "wait_seconds": 0.05})
	if out["stdout"] != "ls\r\nok\r\n$ bye\r\n" || out["status"] != "exited" {
		t.Fatalf("write_stdin after watching: %v", out)
	}
	if _, err := e.Watch(context.Background(), "c1", sid, 0, func(Chunk) error { return nil }); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("watch of a session read to its end: %v", err)
	}
	if err := e.Input("c1", "sess_none", []byte("x")); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("input to no session: %v", err)
	}
}

// TestWatchDropped tells a watcher that joins behind the session's buffer
// how many bytes it missed.
func TestWatchDropped(t *testing.T) {
	e, b := newTerminalExecutor(Config{SessionBuffer: 4})
	b.onStart = func(s *fakeSession) { s.emit("0123456789") }
	out := runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "x", "grace_seconds": 0.05})
	sid := out["session_id"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	var first Chunk
	_, err := e.Watch(ctx, "c1", sid, 0, func(c Chunk) error {
		first = c
		cancel()
		return nil
	})
	if err == nil || string(first.Data) != "6789" || first.Dropped != 6 || first.Cursor != 10 {
		t.Fatalf("first chunk %+v (%q), %v", first, first.Data, err)
	}
}
