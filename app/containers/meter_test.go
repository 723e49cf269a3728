package containers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// cpuBackend is a fake backend whose sandboxes have a CPU time the test
// sets.
type cpuBackend struct {
	*fakeBackend
	cpu map[string]time.Duration
}

func (b *cpuBackend) SandboxCPU(_ context.Context, id string) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.cpu[id]
	if !ok {
		return 0, sandbox.ErrNotFound
	}
	return d, nil
}

func (b *cpuBackend) set(id string, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cpu[id] = d
}

// meterLog records what the owner reports.
type meterLog struct {
	mu  sync.Mutex
	got []string
}

func (m *meterLog) meter(_ context.Context, id string, up, cpu time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, id+" up="+up.String()+" cpu="+cpu.String())
}

func (m *meterLog) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	got := m.got
	m.got = nil
	return got
}

// TestSandboxTimeIsMetered: a held sandbox's time and control group CPU
// are reported at each sweep (what accrued since the last report) and once
// more when it stops, never after; a backend without CPU accounting reports
// time alone; a sandbox that died reports its time without CPU.
func TestSandboxTimeIsMetered(t *testing.T) {
	ctx := context.Background()
	cb := &cpuBackend{fakeBackend: newFake("docker"), cpu: map[string]time.Duration{}}
	log := &meterLog{}
	d, _, _ := testDeps(cb)
	d.Meters = []Meter{log.meter}
	s := New(d)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	c, _ := s.ForUser(ctx, alice, "")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	id := c.ID()
	steps := []struct {
		name    string
		advance time.Duration
		cpu     time.Duration // the sandbox's control group CPU time so far
		act     func()
		want    []string
	}{
		{"first sweep", 20 * time.Second, 300 * time.Millisecond, func() { s.MeterAll(ctx) }, []string{id + " up=20s cpu=300ms"}},
		{"second sweep: what accrued since", 30 * time.Second, 500 * time.Millisecond, func() { s.MeterAll(ctx) }, []string{id + " up=30s cpu=200ms"}},
		{"nothing accrued, nothing reported", 0, 500 * time.Millisecond, func() { s.MeterAll(ctx) }, nil},
		{"stop reports the rest", 5 * time.Second, 600 * time.Millisecond, func() { _ = s.Stop(ctx, id) }, []string{id + " up=5s cpu=100ms"}},
		{"a stopped sandbox is not metered", time.Minute, 600 * time.Millisecond, func() { s.MeterAll(ctx) }, nil},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		cb.set(id, st.cpu)
		st.act()
		if got := log.take(); len(got) != len(st.want) || (len(got) == 1 && got[0] != st.want[0]) {
			t.Fatalf("%s: reported %v, want %v", st.name, got, st.want)
		}
	}

	// Without CPU accounting, the time alone; a dead sandbox reports its
	// time up to its death, once.
	fb := newFake("local")
	d2, _, _ := testDeps(fb)
	d2.Meters = []Meter{log.meter}
	s2 := New(d2)
	s2.now = func() time.Time { return now }
	c2, _ := s2.ForUser(ctx, alice, "")
	if _, err := s2.Exec(ctx, c2.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	s2.MeterAll(ctx)
	if got := log.take(); len(got) != 1 || got[0] != c2.ID()+" up=10s cpu=0s" {
		t.Fatalf("without accounting: %v", got)
	}
	now = now.Add(4 * time.Second)
	fb.execErr = errors.Join(sandbox.ErrUnavailable, errors.New("killed"))
	if _, err := s2.Exec(ctx, c2.ID(), sandbox.Command{}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("exec on a dead sandbox: %v", err)
	}
	s2.MeterAll(ctx)
	if got := log.take(); len(got) != 1 || got[0] != c2.ID()+" up=4s cpu=0s" {
		t.Fatalf("a dead sandbox: %v", got)
	}
}

// TestAdoptedSandboxMetersFromItsCurrentCPU: a sandbox adopted from an
// earlier process reports only the CPU time its group used after the
// adoption (the earlier process reported what came before).
func TestAdoptedSandboxMetersFromItsCurrentCPU(t *testing.T) {
	ctx := context.Background()
	cb := &cpuBackend{fakeBackend: newFake("docker"), cpu: map[string]time.Duration{}}
	s, st, _ := newService(cb)
	c, _ := s.ForUser(ctx, alice, "")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	// A second process over the same records finds the sandbox running.
	log := &meterLog{}
	s2 := New(Deps{Store: st, Backends: []sandbox.Backend{cb}, Folders: &fakeFolders{}, Config: Config{Idle: time.Minute, MaxAge: time.Hour}, Meters: []Meter{log.meter}})
	now := time.Now()
	s2.now = func() time.Time { return now }
	cb.set(c.ID(), 7*time.Second)
	cb.mu.Lock()
	cb.found = append(cb.found, c.ID())
	cb.mu.Unlock()
	s.mu.Lock()
	delete(s.running, c.ID()) // the first process is gone
	s.mu.Unlock()
	if r, err := s2.Sweep(ctx); err != nil || len(r.Adopted) != 1 {
		t.Fatalf("sweep: %+v %v", r, err)
	}
	now = now.Add(30 * time.Second)
	cb.set(c.ID(), 7*time.Second+250*time.Millisecond)
	s2.MeterAll(ctx)
	if got := log.take(); len(got) != 1 || got[0] != c.ID()+" up=30s cpu=250ms" {
		t.Fatalf("adopted sandbox reported %v, want 30 s and 250 ms", got)
	}
}
