package containers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/sandbox"
)

func poolService(b *fakeBackend, leases *memLeases, cfg Config) *Service {
	return poolProcess(b, leases, "p1", cfg)
}

// poolProcess is the owner of the process holder, sharing b (one host's
// sandboxes) and leases (one database) with the other processes of a test.
func poolProcess(b *fakeBackend, leases *memLeases, holder string, cfg Config) *Service {
	st := &memStore{m: map[string]container.Container{}}
	cfg.Idle, cfg.MaxAge = time.Minute, time.Hour
	return New(Deps{Store: st, Backends: []sandbox.Backend{b}, Folders: &fakeFolders{}, Leases: leases.process(holder), Config: cfg})
}

// warmOnHost counts the unclaimed warm sandboxes on the fake's host.
func warmOnHost(b *fakeBackend) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.warm)
}

// TestWarmPoolBoundAcrossProcesses: the pool's size bounds the unclaimed
// warm sandboxes on a host, whichever process booted them. Replicas
// refilling at once boot no more than the size between them; a process
// started after another was killed boots none beside the ones the dead
// one left while its leases live, removes them once the leases lapsed
// and fills the pool again; a process finding another counting skips.
func TestWarmPoolBoundAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	leases := newLeases()
	cfg := Config{WarmPool: 2}
	first, second := poolProcess(b, leases, "p1", cfg), poolProcess(b, leases, "p2", cfg)
	var wg sync.WaitGroup
	for range 8 {
		for _, s := range []*Service{first, second} {
			wg.Add(1)
			go func() { defer wg.Done(); s.RefillPool(ctx) }()
		}
	}
	wg.Wait()
	first.RefillPool(ctx)
	second.RefillPool(ctx)
	if n := warmOnHost(b); n != 2 {
		t.Fatalf("two processes refilling a pool of 2: %d warm sandboxes on the host", n)
	}
	if got := first.WarmPool("docker").Ready + second.WarmPool("docker").Ready; got != 2 {
		t.Fatalf("ready in the two processes: %d, want 2", got)
	}

	// Both processes are killed: their sandboxes live on, and so do their
	// leases until they lapse. A new process boots none beside them.
	killed := slices.Collect(maps.Keys(b.warm))
	third := poolProcess(b, leases, "p3", cfg)
	third.RefillPool(ctx)
	if n, ready := warmOnHost(b), third.WarmPool("docker").Ready; n != 2 || ready != 0 {
		t.Fatalf("restart while the killed processes' leases live: %d warm on the host, %d ready here; want 2, 0", n, ready)
	}
	leases.die("p1")
	leases.die("p2")
	third.RefillPool(ctx)
	if n, ready := warmOnHost(b), third.WarmPool("docker").Ready; n != 2 || ready != 2 {
		t.Fatalf("after the leases lapsed: %d warm on the host, %d ready here; want 2, 2", n, ready)
	}
	for _, name := range killed {
		if !slices.Contains(b.removed, name) {
			t.Fatalf("warm sandbox %s of the killed process still there", name)
		}
	}

	// Another process counting: this one boots nothing and says so.
	third.drainPool()
	if ok, _ := leases.process("p2").Acquire(ctx, poolLease("docker")); !ok {
		t.Fatal("pool lease not taken")
	}
	if busy := third.refill(ctx); !busy || warmOnHost(b) != 0 {
		t.Fatalf("refill while another process counts: busy %v, %d warm", busy, warmOnHost(b))
	}
	_ = leases.process("p2").Release(ctx, poolLease("docker"))
	if busy := third.refill(ctx); busy || warmOnHost(b) != 2 {
		t.Fatalf("refill after: busy %v, %d warm", busy, warmOnHost(b))
	}
}

// TestWarmPoolRefillsAfterClaims: new containers claim the warm
// sandboxes, each once; the pool boots more to stay full; a claimed
// sandbox keeps its slot's lease (so no sweep drops it) until it stops,
// and then is never back in the pool.
func TestWarmPoolRefillsAfterClaims(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	leases := newLeases()
	s := poolService(b, leases, Config{WarmPool: 2})
	s.RefillPool(ctx)
	if st := s.WarmPool("docker"); st.Ready != 2 || st.Size != 2 || st.Note != "" {
		t.Fatalf("after refill: %+v", st)
	}
	seen := map[string]bool{}
	for i := range 5 {
		c, err := s.ForUser(ctx, alice, fmt.Sprintf("c%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
			t.Fatal(err)
		}
		slot := b.claims[c.ID()]
		if slot == "" || seen[slot] {
			t.Fatalf("container %d: claimed slot %q (seen before: %v); cold boots %v", i, slot, seen[slot], b.booted)
		}
		seen[slot] = true
		if mine, _, _ := leases.process("p1").Holds(ctx, sandboxLease(slot)); !mine {
			t.Fatalf("claimed slot %s: its lease is not held", slot)
		}
		s.RefillPool(ctx)
		if st := s.WarmPool("docker"); st.Ready != 2 || st.Claimed != i+1 {
			t.Fatalf("after claim %d: %+v", i, st)
		}
	}
	if len(b.booted) != 0 {
		t.Fatalf("cold boots with a full pool: %v", b.booted)
	}
	// A warm sandbox that ended before a claim is replaced, not claimed.
	s.pool.mu.Lock()
	gone := s.pool.ready["docker"][0]
	s.pool.mu.Unlock()
	b.mu.Lock()
	b.dead[gone] = true
	b.mu.Unlock()
	s.RefillPool(ctx)
	s.pool.mu.Lock()
	still := slices.Contains(s.pool.ready["docker"], gone)
	n := len(s.pool.ready["docker"])
	s.pool.mu.Unlock()
	if still || n != 2 || !slices.Contains(b.removed, gone) {
		t.Fatalf("dead warm sandbox %s: still ready %v, ready %d, removed %v", gone, still, n, b.removed)
	}
	c, _ := s.ForUser(ctx, alice, "c0")
	slot := b.claims[c.ID()]
	if err := s.Stop(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if mine, _, _ := leases.process("p1").Holds(ctx, sandboxLease(slot)); mine {
		t.Fatal("a stopped claimed sandbox keeps its slot's lease")
	}
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	if again := b.claims[c.ID()]; again == slot {
		t.Fatalf("slot %s claimed a second time", slot)
	}
	// RunPool removes the unclaimed warm sandboxes when it ends.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.RunPool(rctx); close(done) }()
	cancel()
	<-done
	if len(b.warm) != 0 || s.WarmPool("docker").Ready != 0 {
		t.Fatalf("warm sandboxes left after the pool ended: %v", b.warm)
	}
}

// TestWarmPoolOff: SANDBOX_WARM_POOL=0 boots no warm sandbox and every
// container boots cold.
func TestWarmPoolOff(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	s := poolService(b, newLeases(), Config{WarmPool: 0})
	s.RefillPool(ctx)
	s.RunPool(ctx) // returns at once
	c, _ := s.ForUser(ctx, alice, "")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	if len(b.warm)+len(b.claims) != 0 || b.booted[c.ID()] != 1 {
		t.Fatalf("pool off: warm %v claims %v cold %v", b.warm, b.claims, b.booted)
	}
	if st := s.WarmPool("docker"); st.Ready != 0 || !strings.Contains(st.Note, "off") {
		t.Fatalf("status: %+v", st)
	}
}

// TestWarmPoolBudget: the pool stops at its memory budget; with the
// budget spent, containers still boot cold.
func TestWarmPoolBudget(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	s := poolService(b, newLeases(), Config{WarmPool: 5, WarmMemory: 64 << 20, WarmCost: 32 << 20})
	s.RefillPool(ctx)
	if st := s.WarmPool("docker"); st.Ready != 2 || !strings.Contains(st.Note, "budget") {
		t.Fatalf("budget of two: %+v", st)
	}
	none := poolService(newFake("docker"), newLeases(), Config{WarmPool: 5, WarmMemory: 1, WarmCost: 32 << 20})
	none.RefillPool(ctx)
	nb := none.backends[0].(*fakeBackend)
	c, _ := none.ForUser(ctx, alice, "")
	if _, err := none.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	if len(nb.warm)+len(nb.claims) != 0 || nb.booted[c.ID()] != 1 {
		t.Fatalf("budget spent: warm %v claims %v cold %v", nb.warm, nb.claims, nb.booted)
	}
}

// TestWarmPoolUnsupported: a backend that cannot keep warm sandboxes
// (runsc, local) says so once; its containers boot cold and the matrix
// shows why.
func TestWarmPoolUnsupported(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	b.warmErr = fmt.Errorf("docker: warm pool: %w: runtime runsc cannot", sandbox.ErrUnsupported)
	s := poolService(b, newLeases(), Config{WarmPool: 2})
	s.RefillPool(ctx)
	c, _ := s.ForUser(ctx, alice, "")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	if b.booted[c.ID()] != 1 {
		t.Fatalf("not booted cold: %v", b.booted)
	}
	if st := s.WarmPool("docker"); st.Ready != 0 || !strings.Contains(st.Note, "runsc") {
		t.Fatalf("status: %+v", st)
	}
}

// TestClaimForADeletedContainerGivesTheSlotBack: a warm sandbox claimed
// for a container deleted meanwhile (its thread was) is removed with the
// lease of the slot it came from: the pool does not count a slot nobody
// holds, and no other process is kept from it for as long as this one
// lives.
func TestClaimForADeletedContainerGivesTheSlotBack(t *testing.T) {
	ctx := context.Background()
	b := newFake("docker")
	leases := newLeases()
	st := &memStore{m: map[string]container.Container{}}
	s := New(Deps{Store: st, Backends: []sandbox.Backend{b}, Folders: &fakeFolders{}, Leases: leases.process("p1"),
		Config: Config{WarmPool: 1, Idle: time.Minute, MaxAge: time.Hour}})
	s.RefillPool(ctx)
	slots := slices.Collect(maps.Keys(b.warm))
	if len(slots) != 1 {
		t.Fatalf("warm sandboxes after a refill: %v, want one", slots)
	}
	c, err := s.ForUser(ctx, alice, "")
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.deleted = map[string]bool{c.ID(): true}
	st.mu.Unlock()
	_, _ = s.Exec(ctx, c.ID(), sandbox.Command{})
	if s.Running(c.ID()) || s.pool.claimed != 1 {
		t.Fatalf("the claim for the deleted container: held %v, claims %d; want not held after one claim", s.Running(c.ID()), s.pool.claimed)
	}
	if mine, other, _ := leases.process("p2").Holds(ctx, sandboxLease(slots[0])); mine || other {
		t.Fatal("the lease of the slot the deleted container's sandbox came from is still held")
	}
}
