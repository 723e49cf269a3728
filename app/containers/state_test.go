package containers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// TestRunningState: a running sandbox's state is saved into a folder
// while it goes on running; putting the folder back stops the sandbox and
// makes the state the container's checkpoint, which the next use
// restores; a folder without a state stops the sandbox too, and the next
// use boots fresh with the note. Nothing is saved where the backend keeps
// files only or no sandbox runs.
func TestRunningState(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, s *Service, id string) {
		t.Helper()
		if _, err := s.Exec(ctx, id, sandbox.Command{Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	b := newSaving("gvisor")
	s, ck, _ := checkpointing(t, b)
	c, _ := s.ForUser(ctx, alice, "box")
	state := t.TempDir()
	if ok, err := s.SaveState(ctx, c.ID(), state); ok || err != nil {
		t.Fatalf("saved with no sandbox running: %v %v", ok, err)
	}
	run(t, s, c.ID())
	if ok, err := s.SaveState(ctx, c.ID(), state); !ok || err != nil {
		t.Fatalf("save: %v %v", ok, err)
	}
	if !s.Running(c.ID()) || b.booted[c.ID()] != 1 {
		t.Fatalf("after saving its state the sandbox runs on: running %v, booted %d", s.Running(c.ID()), b.booted[c.ID()])
	}
	if data, err := os.ReadFile(filepath.Join(state, stateBackendFile)); err != nil || string(data) != "gvisor" {
		t.Fatalf("state folder names %q (%v), want the backend", data, err)
	}

	if err := s.RestoreState(ctx, c.ID(), state, "why"); err != nil {
		t.Fatal(err)
	}
	if s.Running(c.ID()) {
		t.Fatal("the sandbox that ran is still running after its state was put back")
	}
	if _, name, ok, _ := ck.Checkpoint(ctx, c.ID()); !ok || name != "gvisor" {
		t.Fatalf("checkpoint after putting the state back: %v %q", ok, name)
	}
	if _, err := os.Stat(filepath.Join(state, stateImage, "state")); err != nil {
		t.Fatalf("the saved state went with the checkpoint: %v", err)
	}
	run(t, s, c.ID())
	if len(b.restored) != 1 || s.TakeNote(c.ID()) != "" {
		t.Fatalf("restored %v: want the state restored without a note", b.restored)
	}

	if err := s.RestoreState(ctx, c.ID(), filepath.Join(t.TempDir(), "none"), "the thread went back"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok || s.Running(c.ID()) {
		t.Fatalf("without a state: checkpoint %v, running %v; want neither", ok, s.Running(c.ID()))
	}
	run(t, s, c.ID())
	if n := s.TakeNote(c.ID()); !strings.HasPrefix(n, FreshNote) || !strings.Contains(n, "the thread went back") {
		t.Fatalf("note %q", n)
	}

	// A state whose backend cannot be read stops the sandbox all the
	// same, and the next use boots fresh with the note, never an error.
	broken := t.TempDir()
	if err := os.Mkdir(filepath.Join(broken, stateBackendFile), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, s, c.ID())
	if err := s.RestoreState(ctx, c.ID(), broken, "the thread went back"); err != nil {
		t.Fatalf("a state that cannot be read: %v", err)
	}
	if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok || s.Running(c.ID()) {
		t.Fatalf("an unreadable state: checkpoint %v, running %v; want neither", ok, s.Running(c.ID()))
	}
	run(t, s, c.ID())
	if n := s.TakeNote(c.ID()); !strings.Contains(n, "could not be put back") {
		t.Fatalf("note after an unreadable state %q", n)
	}

	// A files-only backend saves nothing.
	f := newFake("docker")
	s2, _, _ := checkpointing(t, f)
	c2, _ := s2.ForUser(ctx, alice, "box")
	run(t, s2, c2.ID())
	if ok, err := s2.SaveState(ctx, c2.ID(), t.TempDir()); ok || err != nil {
		t.Fatalf("files-only backend saved: %v %v", ok, err)
	}
}

// TestEndSandbox: ending a sandbox before its files go back stops it and
// drops the checkpoint its stop or a hand-over took, so the next use
// boots fresh; a sandbox whose stop fails, or that another server keeps,
// is not ended and the answer says so, with no state put back.
func TestEndSandbox(t *testing.T) {
	ctx := context.Background()
	b := newSaving("gvisor")
	s, ck, _ := checkpointing(t, b)
	c, _ := s.ForUser(ctx, alice, "box")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	if ok, err := s.SaveState(ctx, c.ID(), state); !ok || err != nil {
		t.Fatalf("save: %v %v", ok, err)
	}

	b.stopErr = errors.New("the engine timed out")
	if err := s.EndSandbox(ctx, c.ID()); err == nil || !strings.Contains(err.Error(), "the engine timed out") {
		t.Fatalf("end with a failing stop: %v, want the stop's error", err)
	}
	if err := s.RestoreState(ctx, c.ID(), state, "why"); err == nil {
		t.Fatal("a state was put back over a sandbox that did not stop")
	}
	if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok {
		t.Fatal("a state became the checkpoint of a sandbox that did not stop")
	}

	b.stopErr = nil
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	// What a hand-over leaves: the checkpoint of the state given up.
	dir, _ := ck.EmptyCheckpoint(ctx, c.ID())
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte(c.ID()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ck.SealCheckpoint(ctx, c.ID(), "gvisor"); err != nil {
		t.Fatal(err)
	}
	if err := s.EndSandbox(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := ck.Checkpoint(ctx, c.ID()); ok || s.Running(c.ID()) {
		t.Fatalf("after the end: checkpoint %v, running %v; want neither", ok, s.Running(c.ID()))
	}
	booted := b.booted[c.ID()]
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	if len(b.restored) != 0 || b.booted[c.ID()] != booted+1 {
		t.Fatalf("restored %v, booted %d: want a fresh boot", b.restored, b.booted[c.ID()])
	}

	// Another live server holds the sandbox and does not hand it over.
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	b1, b2 := newFake("docker"), newFake("docker")
	p1, _ := process(st, leases, "p1", b1)
	p2, _ := process(st, leases, "p2", b2)
	c2, _ := p1.ForUser(ctx, alice, "")
	if _, err := p1.Exec(ctx, c2.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	for _, end := range []func() error{
		func() error { return p2.EndSandbox(ctx, c2.ID()) },
		func() error { return p2.RestoreState(ctx, c2.ID(), state, "why") },
	} {
		if err := end(); !fault.Is(err, fault.Unavailable) || !strings.Contains(err.Error(), "held by another threadbox server") {
			t.Fatalf("a sandbox kept elsewhere: %v, want it unavailable", err)
		}
	}
	if len(b1.stopped)+len(b2.stopped) != 0 || !p1.Running(c2.ID()) {
		t.Fatalf("stopped %v %v, running on its server %v: want it untouched", b1.stopped, b2.stopped, p1.Running(c2.ID()))
	}
}

// TestStopOfAnUnheldSandboxHeedsItsBackend: a sandbox whose stop failed
// is no longer held but may still run, as its record says; stopping it
// again (Stop, Restart) stops it on the backend its record names and,
// when that fails too, answers the failure and leaves the record saying
// it runs, instead of setting it idle over a sandbox that still runs.
func TestStopOfAnUnheldSandboxHeedsItsBackend(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	s, st, _ := newService(b)
	c, _ := s.ForUser(ctx, alice, "box")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	b.stopErr = errors.New("the engine timed out")
	if err := s.Stop(ctx, c.ID()); err == nil {
		t.Fatal("a held sandbox's failing stop answered no error")
	}
	if s.Running(c.ID()) {
		t.Fatal("the sandbox is still held after its stop")
	}
	for name, stop := range map[string]func() error{
		"stop":    func() error { return s.Stop(ctx, c.ID()) },
		"restart": func() error { return s.Restart(ctx, c.ID()) },
	} {
		if err := stop(); err == nil {
			t.Fatalf("%s of an unheld sandbox whose stop fails answered no error", name)
		}
		if rec, err := st.Container(ctx, c.ID()); err != nil || rec.State() != container.Running {
			t.Fatalf("record after a failing %s: %v %v, want it running", name, rec.State(), err)
		}
	}

	b.stopErr = nil
	if err := s.Stop(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Container(ctx, c.ID()); err != nil || rec.State() == container.Running {
		t.Fatalf("record after the stop: %v %v, want it stopped", rec.State(), err)
	}
}
