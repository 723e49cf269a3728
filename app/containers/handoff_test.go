package containers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// bus hands a wanted lease to every process, as PostgreSQL's
// notifications do (infra/store.Leases.WantLease, Notices.Watch).
type bus struct {
	mu    sync.Mutex
	procs []*Service
	asked []string
}

func (b *bus) WantLease(_ context.Context, name string) error {
	b.mu.Lock()
	b.asked = append(b.asked, name)
	procs := slices.Clone(b.procs)
	b.mu.Unlock()
	for _, p := range procs {
		p.HandBack(name)
	}
	return nil
}

// TestHandOver: a command for a sandbox another live process holds asks
// for it; the holder stops it once idle and the asker boots it; a busy
// sandbox is kept, and the asker answers unavailable after its wait.
func TestHandOver(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	b1, b2 := newFake("docker"), newFake("docker")
	hb := &bus{}
	handoff := func(d *Deps) { d.Handoff, d.HandoffWait = hb, 2*time.Second }
	p1, _ := process(st, leases, "p1", b1, handoff)
	p2, _ := process(st, leases, "p2", b2, handoff)
	hb.procs = []*Service{p1, p2}

	c, _ := p1.ForUser(ctx, alice, "")
	if _, err := p1.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	res, err := p2.Exec(ctx, c.ID(), sandbox.Command{})
	if err != nil || string(res.Stdout) != "docker:"+c.ID() {
		t.Fatalf("a command on the other process: %v", err)
	}
	if !slices.Equal(b1.stopped, []string{c.ID()}) || b2.booted[c.ID()] != 1 || p1.Running(c.ID()) || !p2.Running(c.ID()) {
		t.Fatalf("hand-over: p1 stopped %v, p2 booted %d, running p1 %v p2 %v", b1.stopped, b2.booted[c.ID()], p1.Running(c.ID()), p2.Running(c.ID()))
	}
	if rec, _ := st.Container(ctx, c.ID()); rec.Holder() != "p2" || rec.State() != container.Running {
		t.Fatalf("record after the hand-over: %q %q", rec.Holder(), rec.State())
	}
	if len(hb.asked) == 0 || hb.asked[0] != "sandbox:"+c.ID() {
		t.Fatalf("asked for %v", hb.asked)
	}

	// A command runs in it on p2: p1 waits, then answers unavailable, and
	// p2's sandbox is untouched.
	p2.mu.Lock()
	p2.running[c.ID()].active++
	p2.mu.Unlock()
	p1.handoffWait = 400 * time.Millisecond
	start := time.Now()
	if _, err := p1.Exec(ctx, c.ID(), sandbox.Command{}); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("a busy sandbox elsewhere: %v, want unavailable", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("waited %v for a busy sandbox", took)
	}
	if len(b2.stopped) != 0 || !p2.Running(c.ID()) || b1.booted[c.ID()] != 1 {
		t.Fatalf("a busy sandbox was taken: p2 stopped %v, p1 booted %d", b2.stopped, b1.booted[c.ID()])
	}
	// Once the command ends, the next ask gets it.
	p2.mu.Lock()
	p2.running[c.ID()].active--
	p2.mu.Unlock()
	p1.handoffWait = 2 * time.Second
	if _, err := p1.Exec(ctx, c.ID(), sandbox.Command{}); err != nil || b1.booted[c.ID()] != 2 {
		t.Fatalf("after the command ended: %v, p1 booted %d", err, b1.booted[c.ID()])
	}
}

// TestHandOverWaitEndsWithItsCaller: a request whose context ends while
// it waits for another process to hand a busy sandbox over gets the end
// of its context, not the answer that the sandbox is held elsewhere (the
// holder refused nothing), and the holder's sandbox is untouched.
func TestHandOverWaitEndsWithItsCaller(t *testing.T) {
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	b1, b2 := newFake("docker"), newFake("docker")
	hb := &bus{}
	handoff := func(d *Deps) { d.Handoff, d.HandoffWait = hb, time.Hour }
	p1, _ := process(st, leases, "p1", b1, handoff)
	p2, _ := process(st, leases, "p2", b2, handoff)
	hb.procs = []*Service{p1, p2}
	c, _ := p2.ForUser(context.Background(), alice, "")
	if _, err := p2.Exec(context.Background(), c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	p2.mu.Lock()
	p2.running[c.ID()].active++ // a command runs in it
	p2.mu.Unlock()

	ctx, stop := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, stop)
	_, err := p1.Exec(ctx, c.ID(), sandbox.Command{})
	if !errors.Is(err, context.Canceled) || fault.Is(err, fault.Unavailable) {
		t.Fatalf("a request that ended during the hand-over wait: %v; want the end of its context", err)
	}
	if len(b2.stopped) != 0 || !p2.Running(c.ID()) || b1.booted[c.ID()] != 0 {
		t.Fatalf("the holder's sandbox was taken: p2 stopped %v, p1 booted %d", b2.stopped, b1.booted[c.ID()])
	}
}
