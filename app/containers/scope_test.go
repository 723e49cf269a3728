package containers

import (
	"context"
	"testing"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/thread"
)

type fakeThreads map[string]thread.Thread

func (f fakeThreads) Thread(_ context.Context, orgID, ownerID, id string) (thread.Thread, error) {
	t, ok := f[id]
	if !ok || !t.AccessibleBy(orgID, ownerID) {
		return thread.Thread{}, fault.New(fault.NotFound, "thread not found")
	}
	return t, nil
}

func TestScope(t *testing.T) {
	ctx := context.Background()
	th, _ := thread.New("thr_1", alice.OrgID, "prj_1", alice.UserID, "t", time.Now())
	d, _, _ := testDeps(newFake("docker"))
	d.Threads = fakeThreads{"thr_1": th}
	s := New(d)

	c, err := s.Scope(ctx, alice, "thr_1", false)
	if err != nil || c.ID() != "thr_1" || c.ThreadID() != "thr_1" {
		t.Fatalf("thread scope: %+v %v", c, err)
	}
	if _, err := s.Scope(ctx, bob, "thr_1", true); !fault.Is(err, fault.NotFound) {
		t.Fatalf("bob's view of alice's thread: %v", err)
	}
	if _, err := s.Scope(ctx, alice, "mine", false); !fault.Is(err, fault.NotFound) {
		t.Fatalf("unknown container without create: %v", err)
	}
	made, err := s.Scope(ctx, alice, "mine", true)
	if err != nil || made.ClientID() != "mine" {
		t.Fatalf("create: %+v %v", made, err)
	}
	if got, err := s.Container(ctx, alice, "mine", false); err != nil || got != made.ID() {
		t.Fatalf("lookup after create: %q %v", got, err)
	}
	if _, err := s.Container(ctx, bob, "mine", false); !fault.Is(err, fault.NotFound) {
		t.Fatalf("bob sees alice's container: %v", err)
	}
	// No scope id: the caller's default container, made when new.
	if def, err := s.Scope(ctx, alice, "", false); err != nil || def.ClientID() != "default" || def.OwnerID() != alice.UserID {
		t.Fatalf("no scope id: %+v %v", def, err)
	}
	for _, bad := range []string{"../x", "a/b", "x\x00"} {
		if _, err := s.Scope(ctx, alice, bad, true); err == nil {
			t.Errorf("scope %q accepted", bad)
		}
	}
}
