package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// Checkpoints answers that the fake keeps files only.
func (b *fakeBackend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly("files only: the fake keeps none")
}

// Checkpoint is unsupported.
func (b *fakeBackend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("fake: %w", b.Checkpoints(ctx).Err())
}

// CheckpointRunning is unsupported.
func (b *fakeBackend) CheckpointRunning(ctx context.Context, id, dir string) error {
	return fmt.Errorf("fake: %w", b.Checkpoints(ctx).Err())
}

// Restore is unsupported.
func (b *fakeBackend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("fake: %w", b.Checkpoints(ctx).Err())
}

// savingBackend is a fake that checkpoints: Checkpoint writes the
// sandbox's "state" into the folder, Restore reads it back.
type savingBackend struct {
	*fakeBackend
	checkpointErr error
	restoreErr    error

	mu       sync.Mutex
	saved    []string // container ids checkpointed
	restored []string // container ids restored
}

func newSaving(name string) *savingBackend { return &savingBackend{fakeBackend: newFake(name)} }

func (b *savingBackend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.CheckpointSupport{Supported: true, Mechanism: "fake"}
}

// Checkpoint writes the state; the owner stops the sandbox after.
func (b *savingBackend) Checkpoint(ctx context.Context, id, dir string) error {
	return b.CheckpointRunning(ctx, id, dir)
}

// CheckpointRunning writes the state as Checkpoint does and leaves the
// sandbox running.
func (b *savingBackend) CheckpointRunning(ctx context.Context, id, dir string) error {
	if b.checkpointErr != nil {
		return b.checkpointErr
	}
	b.mu.Lock()
	b.saved = append(b.saved, id)
	b.mu.Unlock()
	return os.WriteFile(filepath.Join(dir, "state"), []byte(id), 0o600)
}

func (b *savingBackend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	if b.restoreErr != nil {
		return b.restoreErr
	}
	if data, err := os.ReadFile(filepath.Join(dir, "state")); err != nil || string(data) != spec.ID {
		return fmt.Errorf("%w: not this container's state: %q %v", sandbox.ErrCheckpointIncompatible, data, err)
	}
	b.mu.Lock()
	b.restored = append(b.restored, spec.ID)
	b.mu.Unlock()
	return nil
}

// dirCheckpoints keeps checkpoint folders under a test folder, sealed by
// a file naming the backend (as infra/sandbox/hostdirs does).
type dirCheckpoints struct {
	root string
	fail map[string]error // by container id: why its checkpoint cannot be fetched
}

func (d dirCheckpoints) dir(id string) string {
	return filepath.Join(d.root, strings.ReplaceAll(id, "/", "_"))
}
func (d dirCheckpoints) EmptyCheckpoint(_ context.Context, id string) (string, error) {
	_ = os.RemoveAll(d.dir(id))
	return d.dir(id), os.MkdirAll(d.dir(id), 0o700)
}
func (d dirCheckpoints) SealCheckpoint(_ context.Context, id, backend string) error {
	return os.WriteFile(filepath.Join(d.dir(id), "sealed"), []byte(backend), 0o600)
}
func (d dirCheckpoints) Checkpoint(_ context.Context, id string) (string, string, bool, error) {
	b, err := os.ReadFile(filepath.Join(d.dir(id), "sealed"))
	if err == nil && d.fail[id] != nil {
		return "", "", true, d.fail[id]
	}
	return d.dir(id), string(b), err == nil, nil
}
func (d dirCheckpoints) StaleCheckpoints(_ context.Context, takenBefore time.Time) ([]string, error) {
	entries, err := os.ReadDir(d.root)
	var ids []string
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join(d.root, e.Name(), "sealed")); err == nil && fi.ModTime().Before(takenBefore) {
			ids = append(ids, e.Name())
		}
	}
	return ids, err
}
func (d dirCheckpoints) DropCheckpoint(_ context.Context, id string) error {
	return os.RemoveAll(d.dir(id))
}
func (d dirCheckpoints) DropFiles(context.Context, string) error { return nil }

// checkpointing returns an owner over backends whose checkpoints live in
// a test folder, with a clock the test moves.
func checkpointing(t *testing.T, backends ...sandbox.Backend) (*Service, dirCheckpoints, func(time.Duration)) {
	t.Helper()
	d, _, _ := testDeps(backends...)
	ck := dirCheckpoints{root: t.TempDir(), fail: map[string]error{}}
	d.Checkpoints = ck
	s := New(d)
	now := time.Now()
	var mu sync.Mutex
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	return s, ck, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
}

func TestCheckpointAtIdleStop(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, s *Service, id string) {
		t.Helper()
		if _, err := s.Exec(ctx, id, sandbox.Command{Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("the next use restores the sandbox and its life goes on", func(t *testing.T) {
		b := newSaving("gvisor")
		s, ck, advance := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		life := s.Life(c.ID())
		advance(2 * time.Minute)
		if stopped := s.StopIdle(ctx); len(stopped) != 1 {
			t.Fatalf("stopped %v", stopped)
		}
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); !ok || len(b.saved) != 1 || s.Running(c.ID()) {
			t.Fatalf("after the idle stop: checkpoint %v, saved %v, running %v", ok, b.saved, s.Running(c.ID()))
		}
		run(t, s, c.ID())
		if len(b.restored) != 1 || b.booted[c.ID()] != 1 {
			t.Fatalf("restored %v, booted %d times: want one boot and one restore", b.restored, b.booted[c.ID()])
		}
		if s.Life(c.ID()) != life || life == 0 {
			t.Fatalf("life %d after the restore, want %d", s.Life(c.ID()), life)
		}
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
			t.Fatal("a restored checkpoint is kept; it is used once")
		}
		if n := s.TakeNote(c.ID()); n != "" {
			t.Fatalf("note after a restore: %q", n)
		}
	})
	t.Run("a refused checkpoint boots fresh with a note", func(t *testing.T) {
		b := newSaving("gvisor")
		s, ck, advance := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		life := s.Life(c.ID())
		advance(2 * time.Minute)
		s.StopIdle(ctx)
		b.restoreErr = fmt.Errorf("%w: taken with runsc version 1", sandbox.ErrCheckpointIncompatible)
		run(t, s, c.ID())
		if b.booted[c.ID()] != 2 || s.Life(c.ID()) == life {
			t.Fatalf("booted %d times, life %d (was %d): want a fresh boot", b.booted[c.ID()], s.Life(c.ID()), life)
		}
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
			t.Fatal("a refused checkpoint is kept")
		}
		n := s.TakeNote(c.ID())
		if !strings.HasPrefix(n, FreshNote) || !strings.Contains(n, "could not be restored") || !strings.Contains(n, "runsc version 1") || strings.Contains(n, "\n") {
			t.Fatalf("note %q, want one line saying the checkpoint could not be restored and why", n)
		}
		if n := s.TakeNote(c.ID()); n != "" {
			t.Fatalf("the note came twice: %q", n)
		}
	})
	t.Run("a checkpoint that cannot be fetched is dropped with a note", func(t *testing.T) {
		b := newSaving("gvisor")
		s, ck, advance := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		advance(2 * time.Minute)
		s.StopIdle(ctx)
		ck.fail[c.ID()] = errors.New("checkpoints: its archive is not in the store")
		run(t, s, c.ID())
		if b.booted[c.ID()] != 2 || len(b.restored) != 0 {
			t.Fatalf("booted %d, restored %v: want a fresh boot", b.booted[c.ID()], b.restored)
		}
		delete(ck.fail, c.ID())
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
			t.Fatal("a checkpoint that could not be fetched is kept")
		}
		if n := s.TakeNote(c.ID()); !strings.HasPrefix(n, FreshNote) || !strings.Contains(n, "not in the store") {
			t.Fatalf("note %q", n)
		}
	})
	t.Run("a removed container's checkpoint goes with it", func(t *testing.T) {
		b := newSaving("gvisor")
		s, ck, advance := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		advance(2 * time.Minute)
		s.StopIdle(ctx)
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); !ok {
			t.Fatal("no checkpoint at the idle stop")
		}
		if err := s.Remove(ctx, c.ID()); err != nil {
			t.Fatal(err)
		}
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
			t.Fatal("the removed container's checkpoint is kept")
		}
	})
	t.Run("the sweep drops a checkpoint past its maximum age", func(t *testing.T) {
		b := newSaving("gvisor")
		s, ck, advance := checkpointing(t, b)
		s.cfg.CheckpointMaxAge = 10 * time.Minute // within the container's own
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		advance(2 * time.Minute)
		s.StopIdle(ctx)
		r, err := s.Sweep(ctx)
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); err != nil || !ok || len(r.Stale) != 0 {
			t.Fatalf("a fresh checkpoint swept: %v %v %v", ok, r.Stale, err)
		}
		advance(s.cfg.CheckpointMaxAge + time.Minute)
		r, err = s.Sweep(ctx)
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); err != nil || ok || len(r.Stale) != 1 {
			t.Fatalf("past its age: kept %v, swept %+v %v", ok, r, err)
		}
	})
	t.Run("a failed checkpoint stops the sandbox and notes it", func(t *testing.T) {
		b := newSaving("gvisor")
		b.checkpointErr = errors.New("runsc checkpoint: no space left on device")
		s, ck, advance := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		advance(2 * time.Minute)
		if stopped := s.StopIdle(ctx); len(stopped) != 1 || s.Running(c.ID()) {
			t.Fatalf("stopped %v, running %v", stopped, s.Running(c.ID()))
		}
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
			t.Fatal("a failed checkpoint is kept")
		}
		run(t, s, c.ID())
		if b.booted[c.ID()] != 2 || len(b.restored) != 0 {
			t.Fatalf("booted %d, restored %v", b.booted[c.ID()], b.restored)
		}
		if n := s.TakeNote(c.ID()); !strings.Contains(n, "checkpoint failed") || !strings.Contains(n, "no space left") {
			t.Fatalf("note %q", n)
		}
	})
	t.Run("a files-only backend stops without a checkpoint or a note", func(t *testing.T) {
		b := newFake("docker")
		s, ck, advance := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		advance(2 * time.Minute)
		s.StopIdle(ctx)
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
			t.Fatal("a files-only backend got a checkpoint")
		}
		run(t, s, c.ID())
		if b.booted[c.ID()] != 2 {
			t.Fatalf("booted %d times", b.booted[c.ID()])
		}
		if n := s.TakeNote(c.ID()); n != "" {
			t.Fatalf("note %q after a planned stop of a files-only backend", n)
		}
	})
	t.Run("a restart is no checkpoint and no note", func(t *testing.T) {
		b := newSaving("gvisor")
		s, ck, _ := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		if err := s.Restart(ctx, c.ID()); err != nil {
			t.Fatal(err)
		}
		run(t, s, c.ID())
		if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok || len(b.saved) != 0 || len(b.restored) != 0 || b.booted[c.ID()] != 2 {
			t.Fatalf("after a restart: checkpoint %v, saved %v, restored %v, booted %d", ok, b.saved, b.restored, b.booted[c.ID()])
		}
		if n := s.TakeNote(c.ID()); n != "" {
			t.Fatalf("note %q after a restart", n)
		}
	})
	t.Run("a sandbox lost mid-command notes it", func(t *testing.T) {
		b := newSaving("gvisor")
		s, _, _ := checkpointing(t, b)
		c, _ := s.ForUser(ctx, alice, "box")
		run(t, s, c.ID())
		b.execErr = fmt.Errorf("%w: sandbox ended", sandbox.ErrUnavailable)
		if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err == nil {
			t.Fatal("want the lost sandbox's error")
		}
		b.execErr = nil
		run(t, s, c.ID())
		if n := s.TakeNote(c.ID()); !strings.Contains(n, "ended") {
			t.Fatalf("note %q, want the lost sandbox said", n)
		}
	})
}

// TestSuspend: a graceful shutdown checkpoints the idle sandboxes of
// backends that can, and leaves the others running for the next process
// to adopt.
func TestSuspend(t *testing.T) {
	ctx := context.Background()
	saving, plain := newSaving("gvisor"), newFake("docker")
	s, ck, _ := checkpointing(t, saving, plain)
	a, _ := s.ForUser(ctx, alice, "a")
	if _, err := s.Exec(ctx, a.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// The second container's sandbox runs on the files-only backend.
	saving.unavailable = errors.New("down")
	b, _ := s.ForUser(ctx, bob, "b")
	if _, err := s.Exec(ctx, b.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	saving.unavailable = nil
	done := s.Suspend(ctx)
	if len(done) != 1 || done[0] != a.ID() {
		t.Fatalf("suspended %v, want only %s", done, a.ID())
	}
	if s.Running(a.ID()) || !s.Running(b.ID()) {
		t.Fatalf("running after suspend: a %v, b %v; want b only", s.Running(a.ID()), s.Running(b.ID()))
	}
	if _, name, ok, _ := ck.Checkpoint(ctx, a.ID()); !ok || name != "gvisor" {
		t.Fatalf("checkpoint of a: %v %q", ok, name)
	}
}

// TestPrewarm: a restore started ahead of a request brings the sandbox
// back from its checkpoint before any command asks for it, with its life;
// the command then finds it running. Without a checkpoint nothing boots.
func TestPrewarm(t *testing.T) {
	ctx := context.Background()
	b := newSaving("gvisor")
	s, ck, advance := checkpointing(t, b)
	c, _ := s.ForUser(ctx, alice, "box")
	<-s.Prewarm(ctx, c.ID())
	if s.Running(c.ID()) || b.booted[c.ID()] != 0 {
		t.Fatalf("without a checkpoint: running %v, booted %d", s.Running(c.ID()), b.booted[c.ID()])
	}
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	life := s.Life(c.ID())
	advance(2 * time.Minute)
	s.StopIdle(ctx)
	if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); !ok {
		t.Fatal("no checkpoint at the idle stop")
	}

	<-s.Prewarm(ctx, c.ID())
	if !s.Running(c.ID()) || len(b.restored) != 1 || s.Life(c.ID()) != life {
		t.Fatalf("after the early restore: running %v, restored %v, life %d (was %d)", s.Running(c.ID()), b.restored, s.Life(c.ID()), life)
	}
	<-s.Prewarm(ctx, c.ID()) // running: nothing to do
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if len(b.restored) != 1 || b.booted[c.ID()] != 1 || s.TakeNote(c.ID()) != "" {
		t.Fatalf("the command after it: restored %v, booted %d", b.restored, b.booted[c.ID()])
	}
}

// lookups counts the checkpoint lookups of a dirCheckpoints.
type lookups struct {
	dirCheckpoints
	n *atomic.Int32
}

func (l lookups) Checkpoint(ctx context.Context, id string) (string, string, bool, error) {
	l.n.Add(1)
	return l.dirCheckpoints.Checkpoint(ctx, id)
}

// TestPrewarmWithoutRestoringBackend: on a server none of whose backends
// restores checkpoints, Prewarm starts nothing, not even the lookup of the
// container's checkpoint; the first command still finds a checkpoint
// another server took, drops it and boots fresh with a note, as before.
func TestPrewarmWithoutRestoringBackend(t *testing.T) {
	ctx := context.Background()
	d, _, _ := testDeps(newFake("docker"))
	ck := dirCheckpoints{root: t.TempDir(), fail: map[string]error{}}
	var n atomic.Int32
	d.Checkpoints = lookups{ck, &n}
	s := New(d)
	c, _ := s.ForUser(ctx, alice, "box")
	if _, err := ck.EmptyCheckpoint(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if err := ck.SealCheckpoint(ctx, c.ID(), "gvisor"); err != nil {
		t.Fatal(err)
	}
	<-s.Prewarm(ctx, c.ID())
	if n.Load() != 0 || s.Running(c.ID()) {
		t.Fatalf("Prewarm looked the checkpoint up %d times, running %v; want nothing done", n.Load(), s.Running(c.ID()))
	}
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok || n.Load() != 1 {
		t.Fatalf("after the command: checkpoint kept %v, lookups %d; want it dropped after one lookup", ok, n.Load())
	}
	if note := s.TakeNote(c.ID()); !strings.Contains(note, "could not be restored") {
		t.Fatalf("note %q", note)
	}
}
