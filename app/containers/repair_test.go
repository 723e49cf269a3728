package containers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// roFolders are folders that went read-only until repaired; a repair can
// be made to fail.
type roFolders struct {
	*fakeFolders
	mu        sync.Mutex
	readOnly  bool
	repairErr error
	repaired  int
}

func (f *roFolders) Prepare(ctx context.Context, id string) ([]sandbox.Mount, error) {
	f.mu.Lock()
	ro := f.readOnly
	f.mu.Unlock()
	if ro {
		return nil, fmt.Errorf("folders %s: %w", id, sandbox.ErrFoldersReadOnly)
	}
	return f.fakeFolders.Prepare(ctx, id)
}

func (f *roFolders) Repair(_ context.Context, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.repairErr != nil {
		return f.repairErr
	}
	f.repaired++
	f.readOnly = false
	return nil
}

// TestReadOnlyFoldersAreRepaired: when a container's folders went
// read-only, a files request (Scope) stops its running sandbox — which
// would keep the read-only view — has the folders repaired and goes on;
// the next command boots a fresh sandbox. A boot that meets read-only
// folders repairs them too. A repair that fails is 503.
func TestReadOnlyFoldersAreRepaired(t *testing.T) {
	ctx := context.Background()
	fb := newFake("docker")
	st := &memStore{m: map[string]container.Container{}}
	rf := &roFolders{fakeFolders: &fakeFolders{}}
	s := New(Deps{Store: st, Backends: []sandbox.Backend{fb}, Folders: rf, Config: Config{Idle: time.Minute, MaxAge: time.Hour}})
	c, err := s.Scope(ctx, alice, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}

	// A files request meets the read-only folders.
	rf.mu.Lock()
	rf.readOnly = true
	rf.mu.Unlock()
	if _, err := s.Scope(ctx, alice, "", true); err != nil {
		t.Fatalf("scope with read-only folders: %v", err)
	}
	if rf.repaired != 1 || s.Running(c.ID()) || len(fb.stopped) != 1 {
		t.Fatalf("repaired %d, running %v, stopped %v: want the sandbox stopped and the folders repaired", rf.repaired, s.Running(c.ID()), fb.stopped)
	}
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil || fb.booted[c.ID()] != 2 {
		t.Fatalf("next command: %v, booted %d times, want 2", err, fb.booted[c.ID()])
	}

	// A boot meets them: repaired, then booted.
	if err := s.Stop(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	rf.mu.Lock()
	rf.readOnly = true
	rf.mu.Unlock()
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil || rf.repaired != 2 || fb.booted[c.ID()] != 3 {
		t.Fatalf("boot with read-only folders: %v, repaired %d, booted %d", err, rf.repaired, fb.booted[c.ID()])
	}

	// The disk is still full: the repair fails, the request is 503.
	rf.mu.Lock()
	rf.readOnly, rf.repairErr = true, errors.New("e2fsck: no space left on device")
	rf.mu.Unlock()
	if _, err := s.Scope(ctx, alice, "", true); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("unrepairable folders: %v, want unavailable", err)
	}
}
