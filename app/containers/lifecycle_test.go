package containers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// process is one threadbox process of a test: its owner over a store and
// leases shared with the others.
// leases shared with the others; edit, when given, adds to its
// dependencies.
func process(st *memStore, leases *memLeases, holder string, b *fakeBackend, edit ...func(*Deps)) (*Service, *fakeFolders) {
	ff := &fakeFolders{}
	d := Deps{Store: st, Backends: []sandbox.Backend{b}, Folders: ff, Leases: leases.process(holder), Config: Config{Idle: time.Minute, MaxAge: time.Hour}}
	for _, f := range edit {
		f(&d)
	}
	return New(d), ff
}

func TestBootIsRecordedAndLeased(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	b1, b2 := newFake("docker"), newFake("docker")
	var hooked []string
	p1, _ := process(st, leases, "p1", b1, onBoot(func(_ context.Context, _ Listener, id string) error {
		hooked = append(hooked, id)
		return errors.New("hooks fail softly")
	}))
	p2, _ := process(st, leases, "p2", b2)

	c, _ := p1.ForUser(ctx, alice, "")
	if _, err := p1.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Container(ctx, c.ID())
	if rec.State() != container.Running || rec.Backend() != "docker" || rec.Holder() != "p1" {
		t.Fatalf("record after boot: state %q backend %q holder %q", rec.State(), rec.Backend(), rec.Holder())
	}
	if !slices.Equal(hooked, []string{c.ID()}) {
		t.Fatalf("boot hooks ran for %v", hooked)
	}
	// Another process on the same database never boots it while p1 holds it.
	if _, err := p2.Exec(ctx, c.ID(), sandbox.Command{}); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("second process: %v, want unavailable", err)
	}
	if err := p2.Stop(ctx, c.ID()); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("second process stopped p1's sandbox: %v", err)
	}
	if err := p2.Remove(ctx, c.ID()); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("second process removed p1's sandbox: %v", err)
	}
	if b2.booted[c.ID()] != 0 || len(b2.stopped)+len(b2.removed) != 0 {
		t.Fatalf("second process touched the sandbox: booted %d stopped %v removed %v", b2.booted[c.ID()], b2.stopped, b2.removed)
	}
	// Once p1 stops it, the record says so and p2 may boot it.
	if err := p1.Stop(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.Container(ctx, c.ID()); rec.State() != container.Idle || rec.Holder() != "" || rec.Backend() != "" {
		t.Fatalf("record after stop: %q %q %q", rec.State(), rec.Holder(), rec.Backend())
	}
	if _, err := p2.Exec(ctx, c.ID(), sandbox.Command{}); err != nil || b2.booted[c.ID()] != 1 {
		t.Fatalf("p2 after p1's stop: %v, booted %d", err, b2.booted[c.ID()])
	}
	// Nothing runs without a record.
	if _, err := p1.Exec(ctx, "usr_x--nobody", sandbox.Command{}); err == nil || b1.booted["usr_x--nobody"] != 0 {
		t.Fatalf("a sandbox booted without a record: %v", err)
	}
}

func TestADeadSandboxClearsItsRecord(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	b := newFake("docker")
	p1, _ := process(st, leases, "p1", b)
	p2, _ := process(st, leases, "p2", newFake("docker"))
	c, _ := p1.ForUser(ctx, alice, "")
	p1.Exec(ctx, c.ID(), sandbox.Command{})
	b.execErr = errors.Join(sandbox.ErrUnavailable, errors.New("killed from outside"))
	if _, err := p1.Exec(ctx, c.ID(), sandbox.Command{}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatal(err)
	}
	if rec, _ := st.Container(ctx, c.ID()); rec.State() != container.Idle || rec.Holder() != "" {
		t.Fatalf("record of a dead sandbox: %q held by %q", rec.State(), rec.Holder())
	}
	if _, err := p2.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatalf("the lease of a dead sandbox was kept: %v", err)
	}
}

// TestClearWaitsForWhatReconcileLeft: the sweep's clear leaves alone the
// records of sandboxes its reconcile could not settle — one left to a
// holder whose lease lapsed just after, and those of a backend it could
// not ask — and a later sweep adopts them with their lives. The clear set
// them idle, and the next sweep then removed a running sandbox and gave
// its container a fresh start.
func TestClearWaitsForWhatReconcileLeft(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	p1, _ := process(st, leases, "p1", newFake("docker"))
	c, _ := p1.ForUser(ctx, alice, "")
	if _, err := p1.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}

	// The holder's lease lapses between the reconcile and the clear.
	b2 := newFake("docker")
	b2.found = []string{c.ID()}
	b2.decided = func(string) { leases.die("p1") }
	p2, _ := process(st, leases, "p2", b2)
	r, err := p2.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cleared)+len(r.Adopted)+len(r.Dropped) != 0 {
		t.Fatalf("first sweep %+v: want the sandbox left to its holder and its record kept", r)
	}
	b2.decided = nil
	if r, err = p2.Sweep(ctx); err != nil || !slices.Equal(r.Adopted, []string{c.ID()}) || len(r.Cleared) != 0 {
		t.Fatalf("second sweep %+v %v: want the sandbox adopted", r, err)
	}
	if note := p2.TakeNote(c.ID()); note != "" {
		t.Fatalf("note of an adopted sandbox: %q", note)
	}

	// A backend the sweep cannot ask: its records wait for it.
	b3 := newFake("docker")
	b3.found = []string{c.ID()}
	b3.unavailable = errors.New("daemon not answering")
	leases.die("p2")
	p3, _ := process(st, leases, "p3", b3)
	if r, err = p3.Sweep(ctx); err != nil || len(r.Cleared) != 0 {
		t.Fatalf("sweep with the backend unavailable %+v %v: want nothing cleared", r, err)
	}
	b3.unavailable = nil
	if r, err = p3.Sweep(ctx); err != nil || !slices.Equal(r.Adopted, []string{c.ID()}) {
		t.Fatalf("sweep with the backend back %+v %v: want the sandbox adopted", r, err)
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	leases := newLeases()
	now := time.Now()
	b1 := newFake("docker")
	p1, _ := process(st, leases, "p1", b1)
	p1.now = func() time.Time { return now }

	// p1 runs a user's container and a thread's, then dies (kill -9).
	c, _ := p1.ForUser(ctx, alice, "")
	th, _ := p1.ForThread(ctx, alice, "thr_1")
	gone, _ := p1.ForUser(ctx, alice, "gone")
	for _, id := range []string{c.ID(), th.ID(), gone.ID()} {
		if _, err := p1.Exec(ctx, id, sandbox.Command{}); err != nil {
			t.Fatal(err)
		}
	}
	// A third live process holds a sandbox of its own.
	p3, _ := process(st, leases, "p3", newFake("docker"))
	held, _ := p3.ForUser(ctx, bob, "")
	p3.Exec(ctx, held.ID(), sandbox.Command{})
	leases.die("p1")

	// A container whose sandbox was stopped while idle: its record lives.
	idle, _ := p1.ForUser(ctx, alice, "idle")

	// The next process finds p1's sandboxes (not "gone": killed with the
	// daemon), one nobody has a record of, the idle one's leftovers (a
	// kubernetes claim) and p3's.
	b2 := newFake("docker")
	b2.found = []string{c.ID(), th.ID(), "orphan", idle.ID(), held.ID()}
	var hooked []string
	p2, ff := process(st, leases, "p2", b2, onBoot(func(_ context.Context, _ Listener, id string) error { hooked = append(hooked, id); return nil }))
	r, err := p2.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(r.Adopted)
	want := []string{th.ID(), c.ID()}
	slices.Sort(want)
	if !slices.Equal(r.Adopted, want) || !slices.Equal(r.Dropped, []string{"orphan", idle.ID()}) {
		t.Fatalf("adopted %v dropped %v, want %v and [orphan %s]", r.Adopted, r.Dropped, want, idle.ID())
	}
	// Only what no record claims loses its files.
	if b2.verdicts["orphan"] != sandbox.Drop || b2.verdicts[idle.ID()] != sandbox.Stop {
		t.Fatalf("verdicts: orphan %v, idle container %v; want drop and stop", b2.verdicts["orphan"], b2.verdicts[idle.ID()])
	}
	if !slices.Equal(b2.found, []string{held.ID()}) {
		t.Fatalf("the sandbox a live process holds was touched: left %v", b2.found)
	}
	if !slices.Equal(r.Cleared, []string{gone.ID()}) {
		t.Fatalf("cleared %v, want the record of the sandbox that is gone", r.Cleared)
	}
	if rec, _ := st.Container(ctx, gone.ID()); rec.State() != container.Idle {
		t.Fatalf("record of a vanished sandbox: %q", rec.State())
	}
	// Its life is gone, and its next result says so, whether the sweep or
	// a request finds the record first.
	if n := p2.TakeNote(gone.ID()); !strings.HasPrefix(n, FreshNote) || !strings.Contains(n, lostWithItsServer) {
		t.Fatalf("note of a cleared record %q, want the fresh-start note", n)
	}
	if rec, _ := st.Container(ctx, c.ID()); rec.Holder() != "p2" || rec.State() != container.Running {
		t.Fatalf("adopted record: %q %q", rec.Holder(), rec.State())
	}
	slices.Sort(hooked)
	if !slices.Equal(hooked, want) || !p2.Running(c.ID()) {
		t.Fatalf("adopted sandboxes not held or not hooked: %v", hooked)
	}
	if !slices.Equal(ff.released, []string{"mounted-1", "mounted-2"}) {
		t.Fatalf("released %v", ff.released)
	}
	if rec, _ := st.Container(ctx, held.ID()); rec.Holder() != "p3" {
		t.Fatalf("p3's record taken: %q", rec.Holder())
	}

	// Adopted sandboxes idle-stop like any other; a user's container past
	// its maximum age goes with its files, a thread's does not.
	later := time.Now().Add(2 * time.Hour)
	p2.now = func() time.Time { return later }
	r, err = p2.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(r.Stopped)
	if !slices.Equal(r.Stopped, want) {
		t.Fatalf("idle-stopped %v, want %v", r.Stopped, want)
	}
	slices.Sort(r.Expired)
	wantExp := []string{c.ID(), gone.ID(), idle.ID()}
	slices.Sort(wantExp)
	if !slices.Equal(r.Expired, wantExp) {
		t.Fatalf("expired %v, want %v (held by a live process: %s, kept)", r.Expired, wantExp, held.ID())
	}
	if _, err := st.Container(ctx, c.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("expired record kept: %v", err)
	}
	if !slices.Contains(ff.removed, c.ID()) || slices.Contains(ff.removed, th.ID()) {
		t.Fatalf("folders removed %v", ff.removed)
	}
	if _, err := st.Container(ctx, held.ID()); err != nil {
		t.Fatalf("a container in use by a live process was expired: %v", err)
	}
}

// quota refuses what its fields say.
type quota struct{ create, boot error }

func (q quota) BeforeCreate(context.Context, string, string) error { return q.create }
func (q quota) Reserve(context.Context, container.Container) error { return q.boot }

func TestQuotaChecks(t *testing.T) {
	ctx := context.Background()
	fb := newFake("docker")
	d, st, _ := testDeps(fb)
	q := &quota{create: fault.New(fault.Forbidden, "containers per user")}
	d.Quota = q
	s := New(d)
	if _, err := s.ForUser(ctx, alice, "x"); !fault.Is(err, fault.Forbidden) {
		t.Fatalf("create over quota: %v", err)
	}
	if len(st.m) != 0 {
		t.Fatal("a refused container was recorded")
	}
	*q = quota{boot: fault.New(fault.RateLimited, "running sandboxes")}
	c, err := s.ForUser(ctx, alice, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); !fault.Is(err, fault.RateLimited) || fb.booted[c.ID()] != 0 {
		t.Fatalf("boot over quota: %v, booted %d", err, fb.booted[c.ID()])
	}
	if rec, _ := st.Container(ctx, c.ID()); rec.State() != container.Idle {
		t.Fatalf("refused boot left state %q", rec.State())
	}
}

// restarted boots a container's sandbox in one process and returns a
// second process over the same records and backend, which finds the
// sandbox running: as after a restart.
func restarted(t *testing.T, edit ...func(*Deps)) (*fakeBackend, *memStore, container.Container, *Service) {
	t.Helper()
	ctx := context.Background()
	b := newFake("docker")
	s, st, _ := newService(b)
	c, _ := s.ForUser(ctx, alice, "")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	d := Deps{Store: st, Backends: []sandbox.Backend{b}, Folders: &fakeFolders{}, Config: Config{Idle: time.Minute, MaxAge: time.Hour}}
	for _, f := range edit {
		f(&d)
	}
	return b, st, c, New(d)
}

// onBoot adds the boot hook h to an owner's dependencies.
func onBoot(h BootHook) func(*Deps) {
	return func(d *Deps) { d.OnBoot = append(d.OnBoot, h) }
}

// TestAdoptionMeetsABoot: a request that starts a container's sandbox
// while the sweep is adopting it (just after a restart) leaves one holder,
// and the boot hooks run once. They ran twice, and the API bridge then
// listened twice in one sandbox ("address already in use"). The request
// takes the sandbox the sweep adopted as it is: no fresh boot, and no note
// saying its life was lost.
func TestAdoptionMeetsABoot(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	hooks := 0
	b, _, c, s2 := restarted(t, onBoot(func(context.Context, Listener, string) error {
		mu.Lock()
		defer mu.Unlock()
		hooks++
		return nil
	}))
	b.mu.Lock()
	b.found = append(b.found, c.ID())
	boots := b.booted[c.ID()]
	// The request comes while the sweep adopts (the request's own
	// adoption of the stale sandbox goes through Reconcile too: it does
	// not send a second request).
	var sent atomic.Bool
	b.adopting = func(id string) {
		if sent.Swap(true) {
			return
		}
		if _, err := s2.Exec(ctx, id, sandbox.Command{}); err != nil {
			t.Errorf("a command while its sandbox is adopted: %v", err)
		}
	}
	b.mu.Unlock()
	if r, err := s2.Sweep(ctx); err != nil || len(r.Adopted) != 1 {
		t.Fatalf("sweep: %+v %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if hooks != 1 {
		t.Fatalf("boot hooks ran %d times for one sandbox, want once", hooks)
	}
	if !s2.Running(c.ID()) {
		t.Fatal("the sandbox is not held after the adoption")
	}
	if note := s2.TakeNote(c.ID()); note != "" {
		t.Fatalf("note of a sandbox the sweep adopted under a request: %q", note)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.booted[c.ID()] != boots {
		t.Fatalf("boots %d (were %d): the request booted an adopted sandbox again", b.booted[c.ID()], boots)
	}
}

// TestAdoptedSandboxOfADeletedContainer: a sandbox whose container record
// was deleted while it was adopted (its thread deleted just after a
// restart) is removed, not held, and runs no boot hook; this was an ERROR
// line and a hook failing on a sandbox no longer there.
func TestAdoptedSandboxOfADeletedContainer(t *testing.T) {
	ctx := context.Background()
	hooks := 0
	b, st, c, s2 := restarted(t, onBoot(func(context.Context, Listener, string) error { hooks++; return nil }))
	b.mu.Lock()
	b.found = append(b.found, c.ID())
	b.adopting = func(id string) {
		st.mu.Lock()
		st.deleted = map[string]bool{id: true}
		st.mu.Unlock()
	}
	b.mu.Unlock()
	if _, err := s2.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if hooks != 0 || s2.Running(c.ID()) {
		t.Fatalf("hooks %d, held %v; want none and not held", hooks, s2.Running(c.ID()))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Contains(b.removed, c.ID()) {
		t.Fatalf("the sandbox was not removed (removed %v)", b.removed)
	}
}

// TestUse: Use boots a stopped sandbox for its function, which an idle
// stop does not end while it runs; the function's own errors come back as
// they are, and one saying the sandbox went away forgets it.
func TestUse(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	b := newFake("kubernetes")
	p, _ := process(st, newLeases(), "p1", b)
	now := time.Now()
	p.now = func() time.Time { return now }
	c, _ := p.ForUser(ctx, alice, "")
	var stoppedDuring []string
	err := p.Use(ctx, c.ID(), func(context.Context) error {
		if b.booted[c.ID()] != 1 || !p.Running(c.ID()) {
			t.Errorf("the function ran without a booted sandbox (booted %d)", b.booted[c.ID()])
		}
		now = now.Add(time.Hour)
		stoppedDuring = p.StopIdle(ctx)
		return fmt.Errorf("kubernetes: open: %w", file.ErrNotFound)
	})
	if !errors.Is(err, file.ErrNotFound) || fault.KindOf(err) != fault.Internal {
		t.Errorf("the function's error came back as %v", err)
	}
	if len(stoppedDuring) != 0 {
		t.Errorf("an idle stop ended the sandbox in use: %v", stoppedDuring)
	}
	now = now.Add(time.Hour)
	if got := p.StopIdle(ctx); !slices.Equal(got, []string{c.ID()}) {
		t.Errorf("after use, idle stop stopped %v", got)
	}
	// A stopped sandbox is booted again for the next use.
	if err := p.Use(ctx, c.ID(), func(context.Context) error { return nil }); err != nil || b.booted[c.ID()] != 2 {
		t.Errorf("use after an idle stop: %v, booted %d", err, b.booted[c.ID()])
	}
	err = p.Use(ctx, c.ID(), func(context.Context) error {
		return fmt.Errorf("kubernetes: %w: pod gone", sandbox.ErrUnavailable)
	})
	if !errors.Is(err, sandbox.ErrUnavailable) || p.Running(c.ID()) {
		t.Errorf("a sandbox gone under its use: %v, still held %v", err, p.Running(c.ID()))
	}
	if rec, _ := st.Container(ctx, c.ID()); rec.State() != container.Idle {
		t.Errorf("record of a sandbox gone under its use: %q", rec.State())
	}
}

// orphanFolders is a Folders that reports orphan folders.
type orphanFolders struct {
	fakeFolders
	found []string
	known [][]string // what each look was told is live
}

func (f *orphanFolders) Orphans(_ context.Context, known []string, _ time.Duration) ([]string, error) {
	f.known = append(f.known, slices.Clone(known))
	return f.found, nil
}

// TestOrphanFoldersAreRemoved: a folder no live container claims is
// removed when two looks, 30 s or more apart, found it orphan; the looks are
// told the live containers.
func TestOrphanFoldersAreRemoved(t *testing.T) {
	ctx := context.Background()
	st := &memStore{m: map[string]container.Container{}}
	ff := &orphanFolders{found: []string{"left-behind"}}
	s := New(Deps{Store: st, Backends: []sandbox.Backend{newFake("docker")}, Folders: ff, Config: Config{Idle: time.Minute, MaxAge: time.Hour}})
	now := time.Now()
	s.now = func() time.Time { return now }
	c, _ := s.ForUser(ctx, alice, "")
	r, err := s.Sweep(ctx)
	if err != nil || len(r.Orphans) != 0 || len(ff.removed) != 0 {
		t.Fatalf("first look removed %v %v (%v): want nothing yet", r.Orphans, ff.removed, err)
	}
	now = now.Add(10 * time.Second) // too soon for another look
	if r, _ := s.Sweep(ctx); len(r.Orphans) != 0 || len(ff.known) != 1 {
		t.Fatalf("a look within 30 s: %v, %d looks", r.Orphans, len(ff.known))
	}
	now = now.Add(time.Minute)
	if r, _ := s.Sweep(ctx); !slices.Equal(r.Orphans, []string{"left-behind"}) || !slices.Equal(ff.removed, []string{"left-behind"}) {
		t.Fatalf("second look removed %v (folders removed %v), want [left-behind]", r.Orphans, ff.removed)
	}
	if len(ff.known) != 2 || !slices.Contains(ff.known[1], c.ID()) {
		t.Fatalf("the looks were told %v, want the live container %s", ff.known, c.ID())
	}
}

// leavingBackend's Ensure ends with its caller gone.
type leavingBackend struct {
	*fakeBackend
	leave context.CancelFunc
}

func (b *leavingBackend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	err := b.fakeBackend.Ensure(ctx, spec)
	b.leave()
	return err
}

// ctxStore fails writes of a cancelled context, as a database does.
type ctxStore struct{ *memStore }

func (s ctxStore) UpdateContainer(ctx context.Context, c container.Container) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.memStore.UpdateContainer(ctx, c)
}

// TestBootOutlivesItsCaller: a sandbox whose caller left while it booted
// is recorded running and gets its boot hooks with a live context; the
// record update and the API bridge's listen once failed with the caller's
// cancelled context.
func TestBootOutlivesItsCaller(t *testing.T) {
	ctx, leave := context.WithCancel(context.Background())
	b := &leavingBackend{fakeBackend: newFake("docker"), leave: leave}
	st := ctxStore{&memStore{m: map[string]container.Container{}}}
	var hookErr error
	hooked := false
	s := New(Deps{Store: st, Backends: []sandbox.Backend{b}, Folders: &fakeFolders{}, Config: Config{Idle: time.Minute, MaxAge: time.Hour},
		OnBoot: []BootHook{func(ctx context.Context, _ Listener, _ string) error {
			hooked, hookErr = true, ctx.Err()
			return nil
		}}})
	c, err := s.ForUser(ctx, alice, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Exec(ctx, c.ID(), sandbox.Command{}) // its caller leaves during the boot
	if !hooked || hookErr != nil {
		t.Fatalf("boot hook ran %v with context error %v; want it run with a live context", hooked, hookErr)
	}
	if rec, _ := st.Container(context.Background(), c.ID()); rec.State() != container.Running {
		t.Fatalf("record %q after a boot its caller left, want running", rec.State())
	}
}

// TestFirstRequestAdoptsAStaleSandbox: after a restart, a request that
// comes before the sweep adopted the container's sandbox adopts it
// itself, where its backend still runs it, instead of booting it fresh:
// its life goes on, with no note; where the backend no longer runs it,
// the request boots it fresh with the note.
func TestFirstRequestAdoptsAStaleSandbox(t *testing.T) {
	ctx := context.Background()
	b, _, c, s2 := restarted(t)
	b.mu.Lock()
	b.found = append(b.found, c.ID())
	boots := b.booted[c.ID()]
	b.mu.Unlock()
	if _, err := s2.Exec(ctx, c.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	adopted, booted := b.verdicts[c.ID()] == sandbox.Adopt, b.booted[c.ID()]
	b.mu.Unlock()
	if !adopted || booted != boots || !s2.Running(c.ID()) {
		t.Fatalf("verdict adopt %v, boots %d (were %d), running %v: want the sandbox adopted by the request", adopted, booted, boots, s2.Running(c.ID()))
	}
	if note := s2.TakeNote(c.ID()); note != "" {
		t.Fatalf("an adopted sandbox's note: %q", note)
	}

	// The sandbox is gone from the backend: the request boots it fresh.
	b2, _, c2, s3 := restarted(t)
	if _, err := s3.Exec(ctx, c2.ID(), sandbox.Command{}); err != nil {
		t.Fatal(err)
	}
	if note := s3.TakeNote(c2.ID()); !strings.HasPrefix(note, FreshNote) {
		t.Fatalf("note of a sandbox booted fresh after its server went: %q", note)
	}
	b2.mu.Lock()
	defer b2.mu.Unlock()
	if b2.booted[c2.ID()] != 2 {
		t.Fatalf("boots %d, want the fresh boot", b2.booted[c2.ID()])
	}
}

// TestBootOfADeletedContainerGivesItsLeaseBack: a sandbox that booted for
// a container deleted meanwhile (its thread was) is removed, and its
// lease given back: a container made anew under the same id (a user's
// default one) is not held by this process for good, where another server
// could never boot it.
func TestBootOfADeletedContainerGivesItsLeaseBack(t *testing.T) {
	ctx := context.Background()
	st, leases := &memStore{m: map[string]container.Container{}}, newLeases()
	b := newFake("docker")
	s1, _ := process(st, leases, "p1", b)
	c, err := s1.ForUser(ctx, alice, "")
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.deleted = map[string]bool{c.ID(): true}
	st.mu.Unlock()
	_, _ = s1.Exec(ctx, c.ID(), sandbox.Command{})
	b.mu.Lock()
	removed := slices.Contains(b.removed, c.ID())
	b.mu.Unlock()
	if !removed || s1.Running(c.ID()) {
		t.Fatalf("the sandbox of the deleted container: removed %v, held %v; want removed and not held", removed, s1.Running(c.ID()))
	}
	if mine, other, _ := leases.process("p2").Holds(ctx, sandboxLease(c.ID())); mine || other {
		t.Fatal("the lease of the deleted container's sandbox is still held")
	}
}
