package containers

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

type memStore struct {
	mu         sync.Mutex
	m          map[string]container.Container
	deleted    map[string]bool // records deleted behind the owner's back: updates fail
	tombstones map[string]container.Tombstone
}

func (s *memStore) CreateContainer(_ context.Context, c container.Container) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[c.ID()]; ok {
		return fault.New(fault.Conflict, "exists")
	}
	s.m[c.ID()] = c
	return nil
}
func (s *memStore) Container(_ context.Context, id string) (container.Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	if !ok {
		return c, fault.New(fault.NotFound, "container not found")
	}
	return c, nil
}
func (s *memStore) UpdateContainer(_ context.Context, c container.Container) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted[c.ID()] {
		return fault.New(fault.NotFound, "container not found")
	}
	s.m[c.ID()] = c
	return nil
}
func (s *memStore) MarkSkills(_ context.Context, id string, may bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	if !ok || s.deleted[id] {
		return fault.New(fault.NotFound, "container not found")
	}
	s.m[id] = c.WithSkills(may)
	return nil
}
func (s *memStore) DeleteContainer(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}
func (s *memStore) ExpireContainer(_ context.Context, t container.Tombstone) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tombstones == nil {
		s.tombstones = map[string]container.Tombstone{}
	}
	if _, ok := s.tombstones[t.ID]; !ok {
		s.tombstones[t.ID] = t
	}
	delete(s.m, t.ID)
	return nil
}
func (s *memStore) Tombstone(_ context.Context, id string) (container.Tombstone, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tombstones[id]
	if !ok {
		return t, fault.New(fault.NotFound, "container tombstone not found")
	}
	return t, nil
}
func (s *memStore) ContainersCreatedBefore(_ context.Context, t time.Time) ([]container.Container, error) {
	return s.list(func(c container.Container) bool { return c.ThreadID() == "" && c.CreatedAt().Before(t) }), nil
}
func (s *memStore) ContainersInState(_ context.Context, st container.State) ([]container.Container, error) {
	return s.list(func(c container.Container) bool { return c.State() == st }), nil
}
func (s *memStore) list(keep func(container.Container) bool) []container.Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []container.Container
	for _, c := range s.m {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// memLeases are leases shared by the "processes" of a test, each a holder.
type memLeases struct {
	mu    sync.Mutex
	by    map[string]string // lease name → holder
	alive map[string]bool   // holders whose process lives
}

func newLeases() *memLeases { return &memLeases{by: map[string]string{}, alive: map[string]bool{}} }

// process returns the leases of one process named holder.
func (m *memLeases) process(holder string) *procLeases {
	m.mu.Lock()
	m.alive[holder] = true
	m.mu.Unlock()
	return &procLeases{m: m, holder: holder}
}

// die ends holder's process: its leases lapse.
func (m *memLeases) die(holder string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alive[holder] = false
}

type procLeases struct {
	m      *memLeases
	holder string
}

func (p *procLeases) Holder() string { return p.holder }
func (p *procLeases) Acquire(_ context.Context, name string) (bool, error) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if h, ok := p.m.by[name]; ok && h != p.holder && p.m.alive[h] {
		return false, nil
	}
	p.m.by[name] = p.holder
	return true, nil
}
func (p *procLeases) Release(_ context.Context, name string) error {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.m.by[name] == p.holder {
		delete(p.m.by, name)
	}
	return nil
}
func (p *procLeases) Holds(_ context.Context, name string) (bool, bool, error) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	h, ok := p.m.by[name]
	if !ok || !p.m.alive[h] {
		return false, false, nil
	}
	return h == p.holder, h != p.holder, nil
}

// fakeBackend records what it was asked and fails on demand.
type fakeBackend struct {
	name        string
	unavailable error
	ensureErr   error
	execErr     error
	stopErr     error // what Stop answers
	mu          sync.Mutex
	booted      map[string]int
	stopped     []string
	removed     []string
	listened    []string
	found       []string        // sandboxes this process did not boot
	held        map[string]bool // sandboxes of found this process adopted
	verdicts    map[string]sandbox.Verdict
	warmErr     error
	warm        map[string]bool   // warm slots booted and not claimed
	claims      map[string]string // container id → the slot it claimed
	dead        map[string]bool   // sandboxes that ended by themselves
	adopting    func(id string)   // called as Reconcile adopts id
	decided     func(id string)   // called after Reconcile's decision about id
}

// Warm boots the warm slot spec.ID unless warmErr says otherwise.
func (b *fakeBackend) Warm(_ context.Context, spec sandbox.Spec) error {
	if b.warmErr != nil {
		return b.warmErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !sandbox.SameTargets(spec.Mounts, sandbox.FolderTargets()) {
		return errors.New("warm: not the sandbox folders")
	}
	b.warm[spec.ID] = true
	return nil
}

// Claim gives the warm slot to spec.ID, once.
func (b *fakeBackend) Claim(_ context.Context, slot string, spec sandbox.Spec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.warm[slot] {
		return errors.New("claim: no such warm slot")
	}
	delete(b.warm, slot)
	b.claims[spec.ID] = slot
	return nil
}

// WarmSandboxes lists the warm slots booted and not claimed, by any
// process sharing the fake (one host's engine), unless warmErr says
// otherwise.
func (b *fakeBackend) WarmSandboxes(context.Context) ([]string, error) {
	if b.warmErr != nil {
		return nil, b.warmErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for name := range b.warm {
		names = append(names, name)
	}
	return names, nil
}

func (b *fakeBackend) Name() string                    { return b.name }
func (b *fakeBackend) Available(context.Context) error { return b.unavailable }
func (b *fakeBackend) Isolation() string               { return "namespaces" }
func (b *fakeBackend) EnforcedLimits(context.Context) ([]string, string) {
	return nil, ""
}
func (b *fakeBackend) Start(context.Context, string, sandbox.Command, *sandbox.TTY) (sandbox.Session, error) {
	return nil, sandbox.ErrUnsupported
}
func (b *fakeBackend) Listen(_ context.Context, id, _ string) (net.Listener, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listened = append(b.listened, id)
	return nil, sandbox.ErrUnsupported
}

// Reconcile offers the sandboxes in found (left by an earlier process) to
// decide and does what it says; as the real backends do, it offers none
// this process holds (adopted by an earlier call).
func (b *fakeBackend) Reconcile(_ context.Context, decide func(string) sandbox.Verdict) (adopted, removed []string, err error) {
	b.mu.Lock()
	found := slices.Clone(b.found)
	b.mu.Unlock()
	for _, id := range found {
		b.mu.Lock()
		held := b.held[id]
		b.mu.Unlock()
		if held {
			continue
		}
		v := decide(id)
		b.mu.Lock()
		if b.verdicts == nil {
			b.verdicts = map[string]sandbox.Verdict{}
		}
		b.verdicts[id] = v
		b.mu.Unlock()
		if b.decided != nil {
			b.decided(id)
		}
		switch v {
		case sandbox.Adopt:
			b.mu.Lock()
			if b.held == nil {
				b.held = map[string]bool{}
			}
			b.held[id] = true
			b.mu.Unlock()
			if b.adopting != nil {
				b.adopting(id)
			}
			adopted = append(adopted, id)
		case sandbox.Drop, sandbox.Stop:
			removed = append(removed, id)
		default:
			continue
		}
		b.mu.Lock()
		b.found = slices.DeleteFunc(b.found, func(f string) bool { return f == id })
		b.mu.Unlock()
	}
	return adopted, removed, nil
}

// Status reports a warm slot or an adopted sandbox running and one in
// dead ended; others say nothing.
func (b *fakeBackend) Status(_ context.Context, id string) (sandbox.Status, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.dead[id]:
		return sandbox.Status{State: sandbox.StateMissing}, nil
	case b.warm[id], b.held[id]:
		return sandbox.Status{State: sandbox.StateRunning}, nil
	}
	return sandbox.Status{}, nil
}
func (b *fakeBackend) Ensure(_ context.Context, spec sandbox.Spec) error {
	if b.ensureErr != nil {
		return b.ensureErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.booted[spec.ID]++
	return nil
}
func (b *fakeBackend) Exec(_ context.Context, id string, cmd sandbox.Command) (sandbox.Result, error) {
	if b.execErr != nil {
		return sandbox.Result{}, b.execErr
	}
	return sandbox.Result{Stdout: []byte(b.name + ":" + id)}, nil
}
func (b *fakeBackend) Stop(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = append(b.stopped, id)
	return b.stopErr
}
func (b *fakeBackend) Remove(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.warm, id)
	b.removed = append(b.removed, id)
	return nil
}

type fakeFolders struct {
	mu       sync.Mutex
	removed  []string
	released []string
}

func (f *fakeFolders) Release(_ context.Context, _ time.Duration, busy func(string) bool) ([]string, error) {
	f.released = nil
	for _, id := range []string{"mounted-1", "mounted-2"} {
		if !busy(id) {
			f.released = append(f.released, id)
		}
	}
	return f.released, nil
}

func (f *fakeFolders) Prepare(_ context.Context, id string) ([]sandbox.Mount, error) {
	return []sandbox.Mount{{Source: "/host/" + id, Target: sandbox.WorkspaceDir}}, nil
}
func (f *fakeFolders) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	return nil
}

func newFake(name string) *fakeBackend {
	return &fakeBackend{name: name, booted: map[string]int{}, warm: map[string]bool{}, claims: map[string]string{}, dead: map[string]bool{}}
}

var alice = user.Principal{UserID: "usr_alice", OrgID: "org_a"}
var bob = user.Principal{UserID: "usr_bob", OrgID: "org_a"}

// testDeps are the dependencies of an owner over backends alone on its
// database, with its records and folders; a test adds what it needs.
func testDeps(backends ...sandbox.Backend) (Deps, *memStore, *fakeFolders) {
	st := &memStore{m: map[string]container.Container{}}
	ff := &fakeFolders{}
	return Deps{Store: st, Backends: backends, Folders: ff, Config: Config{Idle: time.Minute, MaxAge: time.Hour}}, st, ff
}

func newService(backends ...sandbox.Backend) (*Service, *memStore, *fakeFolders) {
	d, st, ff := testDeps(backends...)
	return New(d), st, ff
}

func TestFallbackToTheNextBackend(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		first *fakeBackend
		want  string
	}{
		{"first serves", newFake("docker"), "docker"},
		{"first unavailable", &fakeBackend{name: "docker", unavailable: errors.New("daemon down"), booted: map[string]int{}}, "local"},
		{"first cannot start", &fakeBackend{name: "docker", ensureErr: errors.New("no image"), booted: map[string]int{}}, "local"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _ := newService(tc.first, newFake("local"))
			c, err := s.ForUser(ctx, alice, "")
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}})
			if err != nil || string(res.Stdout) != tc.want+":"+c.ID() {
				t.Fatalf("served by %q, err %v; want %s", res.Stdout, err, tc.want)
			}
		})
	}
	s, _, _ := newService(&fakeBackend{name: "docker", unavailable: errors.New("down")})
	c, _ := s.ForUser(ctx, alice, "x")
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("no backend could start: %v", err)
	}
	s, _, _ = newService()
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); !errors.Is(err, sandbox.ErrNoBackend) || err.Error() != "code_execution provider is not configured." {
		t.Fatalf("no backend configured: %v", err)
	}
}

func TestNamespacingAndAccess(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(newFake("docker"))
	a, _ := s.ForUser(ctx, alice, "my-container")
	b, _ := s.ForUser(ctx, bob, "my-container")
	if a.ID() == b.ID() || a.ClientID() != "my-container" || b.ClientID() != "my-container" {
		t.Fatalf("two users share a container: %s %s", a.ID(), b.ID())
	}
	again, _ := s.ForUser(ctx, alice, "my-container")
	if again.ID() != a.ID() {
		t.Fatal("same id resolved to another container")
	}
	if _, err := s.Lookup(ctx, bob, a.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("bob reached alice's container: %v", err)
	}
	if _, err := s.ForUser(ctx, alice, "../etc"); !fault.Is(err, fault.Invalid) {
		t.Fatalf("bad id: %v", err)
	}
	th, _ := s.ForThread(ctx, alice, "thr_1")
	if th.ID() != "thr_1" || th.ThreadID() != "thr_1" {
		t.Fatalf("thread container: %+v", th)
	}
	if _, err := s.ForThread(ctx, bob, "thr_1"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("bob reached alice's thread container: %v", err)
	}
}

func TestIdleShutdownKeepsTheContainer(t *testing.T) {
	ctx := context.Background()
	fb := newFake("docker")
	s, st, _ := newService(fb)
	now := time.Now()
	s.now = func() time.Time { return now }
	c, _ := s.ForUser(ctx, alice, "")
	s.Exec(ctx, c.ID(), sandbox.Command{})
	if got, _ := st.Container(ctx, c.ID()); got.State() != container.Running || !s.Running(c.ID()) {
		t.Fatalf("not running after exec: %v", got.State())
	}
	if stopped := s.StopIdle(ctx); len(stopped) != 0 {
		t.Fatalf("stopped a fresh sandbox: %v", stopped)
	}
	now = now.Add(2 * time.Minute)
	if stopped := s.StopIdle(ctx); len(stopped) != 1 || stopped[0] != c.ID() {
		t.Fatalf("idle sandbox not stopped: %v", stopped)
	}
	if got, _ := st.Container(ctx, c.ID()); got.State() != container.Idle || s.Running(c.ID()) {
		t.Fatalf("state after idle stop: %v", got.State())
	}
	s.Exec(ctx, c.ID(), sandbox.Command{})
	if fb.booted[c.ID()] != 2 {
		t.Fatalf("next use did not boot again: %d", fb.booted[c.ID()])
	}
}

func TestMaximumAge(t *testing.T) {
	ctx := context.Background()
	fb := newFake("docker")
	s, _, ff := newService(fb)
	now := time.Now()
	s.now = func() time.Time { return now }
	named, _ := s.ForUser(ctx, alice, "named")
	def, _ := s.ForUser(ctx, alice, "")
	th, _ := s.ForThread(ctx, alice, "thr_old")
	if exp := s.ExpiresAt(named); !exp.Equal(now.Add(time.Minute).UTC()) {
		t.Fatalf("expires_at: %v", exp)
	}
	now = now.Add(2 * time.Hour)
	if _, err := s.ForUser(ctx, alice, "named"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("expired named container: %v", err)
	}
	fresh, err := s.ForUser(ctx, alice, "")
	if err != nil || !fresh.CreatedAt().Equal(now.UTC()) || fresh.ID() != def.ID() {
		t.Fatalf("default container not made anew: %v %v", fresh, err)
	}
	if len(ff.removed) != 2 {
		t.Fatalf("expired folders not removed: %v", ff.removed)
	}
	// A thread's container has no maximum age: its files live as long as
	// the thread.
	if c, err := s.ForThread(ctx, alice, "thr_old"); err != nil || !c.CreatedAt().Equal(th.CreatedAt()) {
		t.Fatalf("thread container after the maximum age: %v %v", c, err)
	}
	if slices.Contains(ff.removed, "thr_old") {
		t.Fatal("a thread's files were removed at the maximum age")
	}
	// Named again after expiry, however much later: the same error, never
	// a new container of the same id; for validate (Peek) and the Files
	// API (Scope, Lookup) too. Another user's "named" is another container.
	for _, later := range []time.Duration{0, time.Hour, 24 * 365 * time.Hour} {
		s.now = func() time.Time { return now.Add(later) }
		if _, err := s.ForUser(ctx, alice, "named"); !fault.Is(err, fault.NotFound) || !strings.Contains(err.Error(), `container "named" has passed its maximum age`) {
			t.Fatalf("named again %v after its expiry: %v", later, err)
		}
		if _, _, err := s.Peek(ctx, alice, "named"); !strings.Contains(fault.MessageOf(err), "has passed its maximum age") {
			t.Fatalf("peek of an expired container: %v", err)
		}
		for _, create := range []bool{false, true} {
			if _, err := s.Scope(ctx, alice, "named", create); !strings.Contains(fault.MessageOf(err), "has passed its maximum age") {
				t.Fatalf("scope (create %v) of an expired container: %v", create, err)
			}
		}
		if _, err := s.Lookup(ctx, alice, named.ID()); !strings.Contains(fault.MessageOf(err), "has passed its maximum age") {
			t.Fatalf("lookup of an expired container: %v", err)
		}
	}
	if _, err := s.store.Container(ctx, named.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("an expired container's record was made again: %v", err)
	}
	if _, err := s.Lookup(ctx, bob, named.ID()); fault.MessageOf(err) != "container not found" {
		t.Fatalf("another user's expired container: %v", err)
	}
	if c, err := s.ForUser(ctx, bob, "named"); err != nil || c.ID() == named.ID() {
		t.Fatalf("another user's container of the same name: %v %v", c, err)
	}
	// The default container leaves no tombstone: named or not, it is made
	// anew.
	if c, err := s.ForUser(ctx, alice, container.DefaultClientID); err != nil || c.ID() != def.ID() {
		t.Fatalf("the default container by its name: %v %v", c, err)
	}
}

// TestSweptContainerStaysExpired: a container the sweeper removed at its
// maximum age is, for every later request naming it, the error the first
// request after its maximum age gets — the record is gone, its tombstone
// says so. The default container the sweeper removed is made anew.
func TestSweptContainerStaysExpired(t *testing.T) {
	ctx := context.Background()
	fb := newFake("docker")
	s, _, ff := newService(fb)
	now := time.Now()
	s.now = func() time.Time { return now }
	named, _ := s.ForUser(ctx, alice, "named")
	def, _ := s.ForUser(ctx, alice, "")
	now = now.Add(2 * time.Hour)
	r, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(r.Expired)
	want := []string{named.ID(), def.ID()}
	slices.Sort(want)
	if !slices.Equal(r.Expired, want) || !slices.Contains(ff.removed, named.ID()) {
		t.Fatalf("swept %v (folders removed %v), want %v", r.Expired, ff.removed, want)
	}
	for range 2 {
		if _, err := s.ForUser(ctx, alice, "named"); !fault.Is(err, fault.NotFound) || !strings.Contains(err.Error(), `container "named" has passed its maximum age`) {
			t.Fatalf("a swept container named again: %v", err)
		}
	}
	if _, err := s.store.Container(ctx, named.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("a swept container's record was made again: %v", err)
	}
	if c, err := s.ForUser(ctx, alice, ""); err != nil || c.ID() != def.ID() || !c.CreatedAt().Equal(now.UTC()) {
		t.Fatalf("the swept default container not made anew: %v %v", c, err)
	}
	// A later sweep leaves the new default container alone.
	if r, err := s.Sweep(ctx); err != nil || len(r.Expired) != 0 {
		t.Fatalf("second sweep: %v %v", r.Expired, err)
	}
}

func TestDeadSandboxIsForgottenAndRebooted(t *testing.T) {
	ctx := context.Background()
	fb := newFake("docker")
	s, _, _ := newService(fb)
	c, _ := s.ForUser(ctx, alice, "")
	s.Exec(ctx, c.ID(), sandbox.Command{})
	fb.execErr = errors.Join(sandbox.ErrUnavailable, errors.New("killed"))
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("dead sandbox: %v", err)
	}
	fb.execErr = nil
	if _, err := s.Exec(ctx, c.ID(), sandbox.Command{}); err != nil || fb.booted[c.ID()] != 2 {
		t.Fatalf("not rebooted: %v %d", err, fb.booted[c.ID()])
	}
}

// TestNewNamesAMissingDependency: an owner built without its records or
// its folders is a wiring mistake that New refuses at once, naming what is
// missing, rather than a nil dereference at the first request.
func TestNewNamesAMissingDependency(t *testing.T) {
	st := &memStore{m: map[string]container.Container{}}
	tests := []struct {
		name string
		deps Deps
		want string
	}{
		{"no records", Deps{Folders: &fakeFolders{}}, "Deps.Store"},
		{"no folders", Deps{Store: st}, "Deps.Folders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, tt.want) {
					t.Fatalf("New panicked with %q, want it to name %s", msg, tt.want)
				}
			}()
			New(tt.deps)
		})
	}
	if New(Deps{Store: st, Folders: &fakeFolders{}}) == nil {
		t.Fatal("New with its required dependencies returned nil")
	}
}
