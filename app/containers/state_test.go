package containers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
