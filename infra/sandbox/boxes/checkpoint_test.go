package boxes

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

// TestHeldClients: a kept client is taken once; keeping another for the
// same sandbox ends the first; a client already closed is not kept, so
// that a restore takes the agent over with a new one.
func TestHeldClients(t *testing.T) {
	client := func() *agent.Client {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = b.Close() })
		return NewAgent(a)
	}
	var h HeldClients
	first, second := client(), client()
	h.Put("s", first)
	h.Put("s", second)
	if first.Err() == nil {
		t.Error("the client kept before was not ended")
	}
	if got := h.Take("s"); got != second {
		t.Fatalf("Take = %p, want the client kept last", got)
	}
	if got := h.Take("s"); got != nil {
		t.Fatalf("a second Take = %p, want none", got)
	}
	closed := client()
	closed.Close()
	h.Put("s", closed)
	if got := h.Take("s"); got != nil {
		t.Fatalf("a closed client was kept: %p", got)
	}
}

// TestHeldClientsRecord: a checkpoint's end writes its record; the
// client of a sandbox the checkpoint ended is kept for the restore, or
// closed when the record cannot be written; a sandbox left running keeps
// its client, which is not held.
func TestHeldClientsRecord(t *testing.T) {
	client := func() *agent.Client {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = b.Close() })
		return NewAgent(a)
	}
	img := sandbox.CheckpointImage{Backend: "test", Runtime: "r1", RootFS: "/rootfs", Agent: "sum"}
	var h HeldClients
	dir := t.TempDir()
	ended := client()
	if err := h.Record("s", dir, img, ended, true); err != nil {
		t.Fatal(err)
	}
	if rec, err := ReadCheckpointRecord(dir); err != nil || rec.Image.Runtime != "r1" {
		t.Fatalf("record %+v %v", rec, err)
	}
	if got := h.Take("s"); got != ended || ended.Err() != nil {
		t.Fatalf("the ended sandbox's client was not kept open: %p %v", got, ended.Err())
	}
	running := client()
	if err := h.Record("r", t.TempDir(), img, running, false); err != nil {
		t.Fatal(err)
	}
	if got := h.Take("r"); got != nil || running.Err() != nil {
		t.Fatalf("a running sandbox's client was held (%p) or closed (%v)", got, running.Err())
	}
	lost := client()
	if err := h.Record("l", filepath.Join(dir, "no", "such"), img, lost, true); err == nil {
		t.Fatal("a record that cannot be written was taken")
	}
	if got := h.Take("l"); got != nil || lost.Err() == nil {
		t.Fatalf("without a record the client was kept (%p) or left open", got)
	}
}

// TestSaves: a checkpoint is refused, before any save, when the backend's
// Checkpoints says no, and when the sandbox does not run (or has ended);
// otherwise the backend's save gets the running box with the sandbox's
// lock held, leaving it running for CheckpointRunning only, and its error
// is the call's.
func TestSaves(t *testing.T) {
	ctx := context.Background()
	set := New[*opsBox]("test", slog.New(slog.DiscardHandler))
	support := sandbox.FilesOnly("files only: no runtime here")
	type call struct {
		id, dir      string
		bx           *opsBox
		leaveRunning bool
		locked       bool
	}
	var calls []call
	saveErr := errors.New("disk full")
	s := NewSaves(set, func(context.Context) sandbox.CheckpointSupport { return support },
		func(_ context.Context, id string, bx *opsBox, dir string, leaveRunning bool) error {
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			unlock, err := set.locks.LockContext(gone, id)
			if err == nil {
				unlock()
			}
			calls = append(calls, call{id: id, dir: dir, bx: bx, leaveRunning: leaveRunning, locked: err != nil})
			if dir == "/full" {
				return saveErr
			}
			return nil
		})

	for _, f := range []func(context.Context, string, string) error{s.Checkpoint, s.CheckpointRunning} {
		if err := f(ctx, "a", "/x"); !errors.Is(err, sandbox.ErrUnsupported) || err.Error() != "test: checkpoint: "+sandbox.ErrUnsupported.Error()+": files only: no runtime here" {
			t.Errorf("checkpoint where the backend says no: %v", err)
		}
	}

	support = sandbox.CheckpointSupport{Supported: true, Mechanism: "test"}
	for _, f := range []func(context.Context, string, string) error{s.Checkpoint, s.CheckpointRunning} {
		if err := f(ctx, "a", "/x"); !errors.Is(err, sandbox.ErrUnavailable) || err.Error() != "test: checkpoint a: "+sandbox.ErrUnavailable.Error()+": sandbox is not running" {
			t.Errorf("checkpoint of a sandbox that does not run: %v", err)
		}
	}
	ended := &opsBox{done: make(chan struct{})}
	ended.a = &opsAgent{box: ended, done: make(chan struct{})}
	close(ended.done)
	set.Put("e", ended)
	if err := s.Checkpoint(ctx, "e", "/x"); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("checkpoint of a sandbox that ended: %v", err)
	}
	if len(calls) != 0 {
		t.Fatalf("save was called for a refused checkpoint: %+v", calls)
	}

	bx := &opsBox{done: make(chan struct{})}
	bx.a = &opsAgent{box: bx, done: make(chan struct{})}
	set.Put("a", bx)
	if err := s.Checkpoint(ctx, "a", "/x"); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if err := s.CheckpointRunning(ctx, "a", "/y"); err != nil {
		t.Fatalf("checkpoint running: %v", err)
	}
	if err := s.Checkpoint(ctx, "a", "/full"); err != saveErr {
		t.Errorf("checkpoint whose save fails: %v, want the save's error", err)
	}
	want := []call{
		{id: "a", dir: "/x", bx: bx, leaveRunning: false, locked: true},
		{id: "a", dir: "/y", bx: bx, leaveRunning: true, locked: true},
		{id: "a", dir: "/full", bx: bx, leaveRunning: false, locked: true},
	}
	if len(calls) != len(want) {
		t.Fatalf("save calls = %+v, want %+v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("save call %d = %+v, want %+v", i, calls[i], want[i])
		}
	}
	if n := set.locks.InUse(); n != 0 {
		t.Errorf("%d locks still held after the checkpoints", n)
	}
}
