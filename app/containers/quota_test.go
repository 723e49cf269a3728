package containers

import (
	"context"
	"errors"
	"testing"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// fakeQuota records the checks and refuses those named.
type fakeQuota struct {
	st                       *memStore
	refuseCreate, refuseBoot bool
	creates, boots           []string // "org/user"
	stateAtBoot              []container.State
}

func (q *fakeQuota) BeforeCreate(_ context.Context, orgID, userID string) error {
	q.creates = append(q.creates, orgID+"/"+userID)
	if q.refuseCreate {
		return fault.New(fault.Forbidden, `quota "containersPerUser" reached`)
	}
	return nil
}

// Reserve records the reservation as the store does: c saved as running,
// unless refused.
func (q *fakeQuota) Reserve(ctx context.Context, c container.Container) error {
	q.boots = append(q.boots, c.OrgID()+"/"+c.OwnerID())
	q.st.mu.Lock()
	for _, c := range q.st.m {
		q.stateAtBoot = append(q.stateAtBoot, c.State())
	}
	q.st.mu.Unlock()
	if q.refuseBoot {
		return fault.New(fault.RateLimited, `quota "runningSandboxesPerUser" reached`)
	}
	if c.State() != container.Running || c.Backend() != "" || c.Holder() == "" {
		return fault.Errorf(fault.Invalid, "reserved %s as %s on %q for %q, want running with no backend yet", c.ID(), c.State(), c.Backend(), c.Holder())
	}
	return q.st.UpdateContainer(ctx, c)
}

func TestQuotaBeforeCreate(t *testing.T) {
	d, st, _ := testDeps(newFake("a"))
	q := &fakeQuota{st: st}
	d.Quota = q
	s := New(d)
	ctx := context.Background()
	if _, err := s.ForUser(ctx, alice, "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForUser(ctx, alice, "box"); err != nil { // exists: not checked again
		t.Fatal(err)
	}
	if _, err := s.ForThread(ctx, bob, "thr_1"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"org_a/usr_alice", "org_a/usr_bob"}; len(q.creates) != 2 || q.creates[0] != want[0] || q.creates[1] != want[1] {
		t.Fatalf("checks %v, want %v", q.creates, want)
	}
	q.refuseCreate = true
	_, err := s.ForUser(ctx, alice, "other")
	if !fault.Is(err, fault.Forbidden) || fault.MessageOf(err) != `quota "containersPerUser" reached` {
		t.Fatalf("refused create: %v", err)
	}
	if _, err := st.Container(ctx, container.UserScopedID(alice.UserID, "other")); !fault.Is(err, fault.NotFound) {
		t.Fatalf("a refused container was recorded: %v", err)
	}
}

func TestQuotaBeforeBoot(t *testing.T) {
	b := newFake("a")
	d, st, _ := testDeps(b)
	q := &fakeQuota{st: st}
	d.Quota = q
	s := New(d)
	ctx := context.Background()
	c, err := s.ForUser(ctx, alice, "box")
	if err != nil {
		t.Fatal(err)
	}
	q.refuseBoot = true
	_, err = s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}})
	if !fault.Is(err, fault.RateLimited) {
		t.Fatalf("refused boot: %v", err)
	}
	if b.booted[c.ID()] != 0 || s.Running(c.ID()) {
		t.Fatalf("a refused sandbox booted: %v", b.booted)
	}
	if got, _ := st.Container(ctx, c.ID()); got.State() != container.Idle {
		t.Fatalf("state %s after a refused boot", got.State())
	}
	q.refuseBoot = false
	for range 2 { // the second runs in the booted sandbox: no check
		if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(q.boots) != 2 || q.boots[1] != "org_a/usr_alice" || b.booted[c.ID()] != 1 {
		t.Fatalf("checks %v, boots %v", q.boots, b.booted)
	}
	// A record left running by a sandbox this manager no longer has (it
	// died, or the server restarted) does not count against its own boot.
	s.mu.Lock()
	delete(s.running, c.ID())
	s.mu.Unlock()
	q.stateAtBoot = nil
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if len(q.stateAtBoot) != 1 || q.stateAtBoot[0] != container.Idle {
		t.Fatalf("states seen by the check: %v", q.stateAtBoot)
	}
	if got, _ := st.Container(ctx, c.ID()); got.State() != container.Running {
		t.Fatalf("state %s after the boot", got.State())
	}
}

// TestQuotaSlotGivenBackWhenTheBootFails: the running slot is taken before
// the boot (the record says running while it boots); a boot that fails
// gives it back, so the record says idle and counts against nothing.
func TestQuotaSlotGivenBackWhenTheBootFails(t *testing.T) {
	b := newFake("a")
	d, st, _ := testDeps(b)
	q := &fakeQuota{st: st}
	d.Quota = q
	s := New(d)
	ctx := context.Background()
	c, err := s.ForUser(ctx, alice, "box")
	if err != nil {
		t.Fatal(err)
	}
	b.ensureErr = errors.New("no space left")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err == nil {
		t.Fatal("a failed boot ran the command")
	}
	if len(q.boots) != 1 {
		t.Fatalf("reservations %v, want one", q.boots)
	}
	if got, _ := st.Container(ctx, c.ID()); got.State() != container.Idle || got.Holder() != "" {
		t.Fatalf("after a failed boot the record is %s held by %q", got.State(), got.Holder())
	}
	b.ensureErr = nil
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Container(ctx, c.ID()); got.State() != container.Running || got.Backend() != "a" {
		t.Fatalf("after the boot the record is %s on %q", got.State(), got.Backend())
	}
}
