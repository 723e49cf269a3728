// Package containers is the one owner of sandboxes' lives: it resolves the
// container a request names (namespaced per user, or a thread's), boots its
// sandbox on first use on the first backend that can serve, runs commands,
// sessions and listeners in it by container id, and stops, restarts,
// expires and removes it. Its decisions are recorded in the database: each
// container's state, backend and holding server process, and a lease per
// running sandbox that the holder renews, so no two processes on one
// database boot, stop or remove one sandbox at once. A sweeper idle-stops
// sandboxes, removes containers past their maximum age, adopts or removes
// the sandboxes an earlier process left, and releases the disk quota mounts
// of containers not in use.
package containers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// Folders prepares and removes a container's host folders.
type Folders interface {
	// Prepare makes the folders exist (mounting a disk quota) and returns
	// their mounts at the sandbox's folder paths.
	Prepare(ctx context.Context, containerID string) ([]sandbox.Mount, error)
	// Remove deletes the container's folders and disk image.
	Remove(ctx context.Context, containerID string) error
	// Release unmounts the disk quotas of containers whose folders were not
	// prepared within idle, except those busy names; it returns the
	// container ids (or folder names) released.
	Release(ctx context.Context, idle time.Duration, busy func(containerID string) bool) ([]string, error)
}

// Leases are the database leases of this process (app/lease.Keeper).
type Leases interface {
	// Holder names this process.
	Holder() string
	// Acquire takes the named lease; false when another live process has it.
	Acquire(ctx context.Context, name string) (bool, error)
	// Release gives the named lease back.
	Release(ctx context.Context, name string) error
	// Holds reports whether this process (mine) or another live one (other)
	// holds the named lease.
	Holds(ctx context.Context, name string) (mine, other bool, err error)
}

// Quota checks an org's quotas before a container is made or a sandbox
// boots; an error is the request's answer (app/quota.Service).
type Quota interface {
	BeforeCreate(ctx context.Context, orgID, userID string) error
	// Reserve takes the running-sandbox slot of c, recorded as booting
	// (c.Booting), atomically across every server on the database; a
	// refusal records nothing.
	Reserve(ctx context.Context, c container.Container) error
}

// Listener listens on a loopback address inside a container's running
// sandbox (the owner itself, Service.Listen).
type Listener interface {
	Listen(ctx context.Context, containerID, addr string) (net.Listener, error)
}

// BootHook runs after a sandbox of the container booted or was adopted,
// with the owner to listen in it through (the in-sandbox API bridge listens
// in it). An error is logged; the sandbox serves anyway.
type BootHook func(ctx context.Context, sb Listener, containerID string) error

// Config tunes the owner.
type Config struct {
	Idle   time.Duration // idle time before a sandbox is shut down (default 5m)
	MaxAge time.Duration // hard maximum age of a container (default 30 days)
	// CheckpointMaxAge is how long a checkpoint of a sandbox is kept for
	// its next use (default 30 days; negative keeps it until used).
	CheckpointMaxAge time.Duration
	Sweep            time.Duration // the sweeper's interval (default 30s)
	Limits           sandbox.Limits
	Env              []string // set for every sandbox
	// WarmPool is how many warm sandboxes (booted before any container
	// claims them) each backend keeps ready; 0 keeps none (RunPool).
	WarmPool int
	// WarmMemory is the memory budget of all warm sandboxes together
	// (default DefaultWarmMemory); each is charged WarmCost (default
	// DefaultWarmCost).
	WarmMemory int64
	WarmCost   int64
}

// Service is the owner of sandboxes. It implements the sandbox executor the
// tool loop consumes.
type Service struct {
	store    container.Repository
	backends []sandbox.Backend
	folders  Folders
	leases   Leases
	// handoff, when set, asks another server for a sandbox it holds
	// (handoff.go).
	handoff     Handoff
	handoffWait time.Duration
	threads     Threads
	quota       Quota
	retainer    Retainer
	hooks       []BootHook
	started     []func(adopted bool)
	swept       []func(SweepReport)
	meters      []Meter
	cfg         Config
	log         *slog.Logger
	now         func() time.Time
	pool        *pool
	ckpt        lives // checkpoints and the lives of sandboxes (checkpoint.go)

	mu        sync.Mutex
	running   map[string]*live // the sandboxes this process holds, by container id
	locks     sandbox.Locks    // the decisions about one container at a time
	orphansAt time.Time        // the last look for orphan folders
	orphans   map[string]bool  // the orphan folders found at that look
}

// live is a sandbox this process holds and the backend that serves it.
type live struct {
	backend  sandbox.Backend
	slot     string // the warm slot it was claimed from, whose lease it keeps; or ""
	lastUsed time.Time
	active   int
	meter    metered // guarded by Service.mu
}

// Deps is what the owner is built from. Store and Folders are required;
// every other field may be left zero.
type Deps struct {
	// Store keeps the container records (required).
	Store container.Repository
	// Backends serve sandboxes, tried in order.
	Backends []sandbox.Backend
	// Folders prepares and removes containers' host folders (required).
	Folders Folders
	// Leases are this process's database leases; nil for a process that
	// shares its database with no other (tests).
	Leases Leases
	// Threads lets scope ids name threads; nil: they name containers only.
	Threads Threads
	// Quota makes every new container and every boot pass its checks; nil
	// checks nothing.
	Quota Quota
	// Handoff makes a command for a sandbox another live server holds ask
	// that server for it, waiting up to HandoffWait (zero means
	// DefaultHandoffWait), instead of failing at once.
	Handoff     Handoff
	HandoffWait time.Duration
	// Retainer keeps each container's outputs before the container is
	// removed at its maximum age, and forgets them with a container deleted
	// for good; nil keeps nothing.
	Retainer Retainer
	// Checkpoints makes the owner checkpoint the sandboxes of backends
	// that can, in its folders; nil: every sandbox keeps its files only.
	Checkpoints Checkpoints
	// OnBoot runs after each boot or adoption.
	OnBoot []BootHook
	// OnStart is told of each sandbox this process starts holding, booted
	// or adopted (metrics).
	OnStart []func(adopted bool)
	// OnSweep is told of what each sweep did (metrics).
	OnSweep []func(SweepReport)
	// Meters receive the sandbox time of every sandbox this process holds:
	// at each sweep and when the sandbox stops, so that a long-lived
	// sandbox counts on the days it ran.
	Meters []Meter
	Config Config
	// Log gets the owner's decisions; nil discards them.
	Log *slog.Logger
}

// New returns the owner built from d. A missing required dependency is a
// wiring mistake: New panics naming it.
func New(d Deps) *Service {
	if d.Store == nil {
		panic("containers: New: Deps.Store is required")
	}
	if d.Folders == nil {
		panic("containers: New: Deps.Folders is required")
	}
	cfg := d.Config
	if cfg.Idle <= 0 {
		cfg.Idle = 5 * time.Minute
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 30 * 24 * time.Hour
	}
	if cfg.CheckpointMaxAge == 0 {
		cfg.CheckpointMaxAge = 30 * 24 * time.Hour
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 30 * time.Second
	}
	if cfg.WarmMemory <= 0 {
		cfg.WarmMemory = DefaultWarmMemory
	}
	if cfg.WarmCost <= 0 {
		cfg.WarmCost = DefaultWarmCost
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Leases == nil {
		d.Leases = soleLeases{}
	}
	if d.HandoffWait <= 0 {
		d.HandoffWait = DefaultHandoffWait
	}
	return &Service{store: d.Store, backends: d.Backends, folders: d.Folders, leases: d.Leases,
		handoff: d.Handoff, handoffWait: d.HandoffWait, threads: d.Threads, quota: d.Quota, retainer: d.Retainer,
		hooks: d.OnBoot, started: d.OnStart, swept: d.OnSweep, meters: d.Meters,
		cfg: cfg, log: d.Log, now: time.Now, pool: newPool(), ckpt: lives{folders: d.Checkpoints},
		running: map[string]*live{}}
}

// soleLeases are the leases of a process alone on its database: it always
// holds them.
type soleLeases struct{}

func (soleLeases) Holder() string                                    { return "sole" }
func (soleLeases) Acquire(context.Context, string) (bool, error)     { return true, nil }
func (soleLeases) Release(context.Context, string) error             { return nil }
func (soleLeases) Holds(context.Context, string) (bool, bool, error) { return false, false, nil }

// Retainer keeps what must outlive a container's files
// (app/files.Service): the outputs of a container removed at its maximum
// age, which stay downloadable, and the records it forgets when a
// container is deleted for good.
type Retainer interface {
	// Retain keeps the container's outputs and returns the sandbox paths
	// of those it left out (outputs larger than the server retains, or
	// whose holes, stored whole, would pass its cap or the org's storage
	// quota).
	Retain(ctx context.Context, containerID, orgID, ownerID string) (skipped []string, err error)
	Forget(ctx context.Context, containerID string) error
}

// RunningByBackend counts the sandboxes this process holds, per backend.
func (s *Service) RunningByBackend() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, l := range s.running {
		out[l.backend.Name()]++
	}
	return out
}

// sandboxLease names the lease of a container's running sandbox.
func sandboxLease(id string) string { return "sandbox:" + id }

// Idle returns the idle shutdown period.
func (s *Service) Idle() time.Duration { return s.cfg.Idle }

// MaxAge returns the hard maximum age.
func (s *Service) MaxAge() time.Duration { return s.cfg.MaxAge }

// ExpiresAt is the rolling expiry of c shown to clients.
func (s *Service) ExpiresAt(c container.Container) time.Time {
	return c.ExpiresAt(s.cfg.Idle, s.cfg.MaxAge)
}

// ForUser resolves the caller's container named clientID ("" or
// container.DefaultClientID means the default container), creating it when
// new. A container past its maximum age is removed and leaves a tombstone:
// naming it then fails, and so does every later request naming it; the
// default container is made anew instead.
func (s *Service) ForUser(ctx context.Context, p user.Principal, clientID string) (container.Container, error) {
	if clientID == "" {
		clientID = container.DefaultClientID
	}
	isDefault := clientID == container.DefaultClientID
	if err := container.ValidateClientID(clientID); err != nil {
		return container.Container{}, err
	}
	if err := confine(p, container.UserScopedID(p.UserID, clientID)); err != nil {
		return container.Container{}, err
	}
	return s.resolve(ctx, container.UserScopedID(p.UserID, clientID), isDefault, func() (container.Container, error) {
		return container.NewForUser(p.OrgID, p.UserID, clientID, s.now())
	}, p)
}

// ForThread resolves the container of a thread the caller may access (the
// caller has checked that), creating it when new.
func (s *Service) ForThread(ctx context.Context, p user.Principal, threadID string) (container.Container, error) {
	if err := confine(p, threadID); err != nil {
		return container.Container{}, err
	}
	return s.resolve(ctx, threadID, false, func() (container.Container, error) {
		return container.NewForThread(p.OrgID, p.UserID, threadID, s.now())
	}, p)
}

// Lookup returns the container with storage id if the caller may use it.
// One removed at its maximum age is the same error as when it was
// removed.
func (s *Service) Lookup(ctx context.Context, p user.Principal, id string) (container.Container, error) {
	if err := confine(p, id); err != nil {
		return container.Container{}, err
	}
	c, err := s.store.Container(ctx, id)
	if fault.Is(err, fault.NotFound) {
		if err := s.tombstoned(ctx, p, id); err != nil {
			return container.Container{}, err
		}
	}
	if err != nil || !c.AccessibleBy(p.OrgID, p.UserID) {
		return container.Container{}, fault.New(fault.NotFound, "container not found")
	}
	return c, nil
}

// tombstoned is errExpired when the caller's container id, which has no
// record, was removed at its maximum age (it has a tombstone), and nil
// when it was not.
func (s *Service) tombstoned(ctx context.Context, p user.Principal, id string) error {
	t, err := s.store.Tombstone(ctx, id)
	switch {
	case err == nil && t.AccessibleBy(p.OrgID, p.UserID):
		return errExpired(t.ClientID)
	case err == nil || fault.Is(err, fault.NotFound):
		return nil
	}
	return fmt.Errorf("containers: %w", err)
}

// resolve returns the container id, made by mk when it has no record. One
// past its maximum age is removed (with a tombstone, unless it is the
// default container) and is errExpired, or made anew when recreate is set;
// an id with a tombstone is errExpired too, as long as it exists.
func (s *Service) resolve(ctx context.Context, id string, recreate bool, mk func() (container.Container, error), p user.Principal) (container.Container, error) {
	unlock, err := s.lockFor(ctx, id)
	if err != nil {
		return container.Container{}, err
	}
	defer unlock()
	c, err := s.store.Container(ctx, id)
	switch {
	case fault.Is(err, fault.NotFound):
		if !recreate {
			if err := s.tombstoned(ctx, p, id); err != nil {
				return container.Container{}, err
			}
		}
		return s.create(ctx, mk)
	case err != nil:
		return container.Container{}, fmt.Errorf("containers: %w", err)
	}
	if !c.AccessibleBy(p.OrgID, p.UserID) {
		return container.Container{}, fault.New(fault.NotFound, "container not found")
	}
	if c.Expired(s.now(), s.cfg.MaxAge) {
		if err := s.expireLocked(ctx, c); err != nil {
			return container.Container{}, err
		}
		if !recreate {
			return container.Container{}, errExpired(c.ClientID())
		}
		return s.create(ctx, mk)
	}
	return c, nil
}

// create records a new container, within the org's quota.
func (s *Service) create(ctx context.Context, mk func() (container.Container, error)) (container.Container, error) {
	c, err := mk()
	if err != nil {
		return container.Container{}, err
	}
	if s.quota != nil {
		if err := s.quota.BeforeCreate(ctx, c.OrgID(), c.OwnerID()); err != nil {
			return container.Container{}, err
		}
	}
	if err := s.store.CreateContainer(ctx, c); err != nil {
		return container.Container{}, fmt.Errorf("containers: create: %w", err)
	}
	return c, nil
}

// errExpired is the answer to a request naming a container past its
// maximum age (which removes it with its files).
func errExpired(clientID string) error {
	return fault.Errorf(fault.NotFound, "container %q has passed its maximum age and is removed with its files; send the request without a container to get a new one", clientID)
}

// errElsewhere is the answer when another server process holds the
// container's sandbox.
// errKept is acquire's answer when another live server keeps the
// container's sandbox after being asked to hand it over.
var errKept = errors.New("containers: the sandbox's holder kept it")

// acquire takes the container's sandbox lease, asking another live server
// that holds it to hand the sandbox over (handed reports that it did);
// errKept when it did not within the hand-over wait. The caller holds the
// container's lock.
func (s *Service) acquire(ctx context.Context, id string) (handed bool, err error) {
	ok, err := s.leases.Acquire(ctx, sandboxLease(id))
	if err != nil || ok {
		return false, err
	}
	if ok, err = s.takeOver(ctx, id); err != nil {
		return false, err
	}
	if !ok {
		return false, errKept
	}
	return true, nil
}

func errElsewhere(id string) error {
	return fault.Errorf(fault.Unavailable, "the sandbox of container %q is held by another threadbox server; try again shortly", id)
}

// Touch records a use of the container now, rolling its expiry forward.
func (s *Service) Touch(ctx context.Context, c container.Container) (container.Container, error) {
	c = c.Touch(s.now())
	return c, s.store.UpdateContainer(ctx, c)
}

// MarkSkills records whether the container's skills folder may hold skills
// (container.Container.MayHoldSkills) and returns it so marked: set before
// skills are loaded into the folder, cleared after it was emptied.
func (s *Service) MarkSkills(ctx context.Context, c container.Container, may bool) (container.Container, error) {
	if err := s.store.MarkSkills(ctx, c.ID(), may); err != nil {
		return container.Container{}, fmt.Errorf("containers: mark skills: %w", err)
	}
	return c.WithSkills(may), nil
}

// lock takes the container's lock within this process, however long it
// waits: for the owner's own work, which must finish (the sweep, a
// hand-over, the shutdown's checkpoints).
func (s *Service) lock(id string) func() { return s.locks.Lock(id) }

// lockFor takes the container's lock for a request, giving up with the
// end of its context: a chat turn stopped, or a Messages API request whose
// client left, does not wait behind the boot or restore under way (up to a
// minute), which goes on by itself and serves the next caller.
func (s *Service) lockFor(ctx context.Context, id string) (unlock func(), err error) {
	if unlock, err = s.locks.LockContext(ctx, id); err != nil {
		return nil, fmt.Errorf("containers: wait for container %s: %w", id, err)
	}
	return unlock, nil
}

// held returns the sandbox this process holds for container id (nil when
// it holds none) and whether a command runs in it.
func (s *Service) held(id string) (l *live, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l = s.running[id]
	return l, l != nil && l.active > 0
}

// ensure boots the container's sandbox unless this process holds one,
// trying each backend in order, and marks it in use. The boot is taken under
// the container's lease, so no other process boots it at once.
func (s *Service) ensure(ctx context.Context, id string) (*live, error) {
	unlock, err := s.lockFor(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.mu.Lock()
	l := s.running[id]
	if l != nil {
		l.active++
		l.lastUsed = s.now()
	}
	s.mu.Unlock()
	if l != nil {
		return l, nil
	}
	if len(s.backends) == 0 {
		return nil, sandbox.ErrNoBackend
	}
	c, err := s.store.Container(ctx, id)
	if err != nil {
		// Nothing runs without a record.
		return nil, s.hide(id, "boot", fmt.Errorf("containers: boot %s: %w", id, err))
	}
	handed, err := s.acquire(ctx, id)
	if errors.Is(err, errKept) {
		return nil, errElsewhere(c.ClientID())
	}
	if err != nil {
		return nil, s.hide(id, "boot", fmt.Errorf("containers: boot %s: %w", id, err))
	}
	if handed {
		// The holder may have changed the record while handing over.
		if c, err = s.store.Container(ctx, id); err != nil {
			s.giveBack(id)
			return nil, s.hide(id, "boot", fmt.Errorf("containers: boot %s: %w", id, err))
		}
	}
	if c.State() == container.Running {
		// With its lease, a record still saying running is stale: its
		// server stopped or died. Where its backend still runs the
		// sandbox, this request adopts it (as the sweep would) and it
		// goes on with its processes and sessions.
		if l := s.adoptStale(ctx, c); l != nil {
			return l, nil
		}
		// Its sandbox died too: the record must not count against its own
		// boot, and the life it claims is gone.
		s.ckpt.note(id, lostWithItsServer)
		c = c.Stopped()
		if err := s.store.UpdateContainer(ctx, c); err != nil {
			s.giveBack(id)
			return nil, s.hide(id, "boot", fmt.Errorf("containers: boot %s: %w", id, err))
		}
	}
	if s.quota != nil {
		// The slot is taken before the boot: a sandbox counts as running
		// from here, so concurrent boots cannot all pass the quota.
		if err := s.quota.Reserve(ctx, c.Booting(s.leases.Holder(), s.now())); err != nil {
			s.giveBack(id)
			return nil, err
		}
	}
	l, err = s.boot(ctx, c)
	if err != nil {
		s.unreserve(id)
		s.giveBack(id)
		return nil, s.hide(id, "boot", err)
	}
	return l, nil
}

// adoptStale takes over the sandbox of container c, whose record says it
// runs under a holder that is gone (this process holds its lease now),
// where c's backend still runs it: the first request after a restart does
// not wait for the sweep's adoption, nor boot the sandbox fresh. nil when
// no backend runs it. The caller holds c's lock.
func (s *Service) adoptStale(ctx context.Context, c container.Container) *live {
	for _, b := range s.backends {
		if b.Name() != c.Backend() || b.Available(ctx) != nil {
			continue
		}
		adopted, _, err := b.Reconcile(ctx, func(id string) sandbox.Verdict {
			if id == c.ID() {
				return sandbox.Adopt
			}
			return sandbox.Leave
		})
		if err == nil && slices.Contains(adopted, c.ID()) {
			s.log.Info("sandbox adopted by its first request after its server went", "container", c.ID(), "backend", b.Name())
			return s.hold(ctx, c, b, 1, true, "")
		}
		// A sweep of this process adopting it meanwhile: the backend
		// holds it (and offered it to neither call again), and the
		// sweep, finding it held when it takes the lock, leaves it to
		// this request.
		if st, err := b.Status(ctx, c.ID()); err == nil && st.State == sandbox.StateRunning {
			s.log.Info("sandbox adopted by the sweep under its first request after its server went", "container", c.ID(), "backend", b.Name())
			return s.hold(ctx, c, b, 1, true, "")
		}
		return nil
	}
	return nil
}

// unreserve gives back the running slot a failed boot reserved: the
// container's record, if it says this process's sandbox runs, says idle.
func (s *Service) unreserve(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.store.Container(ctx, id)
	if err != nil || c.State() != container.Running || c.Holder() != s.leases.Holder() {
		return
	}
	if err := s.store.UpdateContainer(ctx, c.Stopped()); err != nil && !fault.Is(err, fault.NotFound) {
		s.log.Warn("running slot of a failed boot not given back", "container", id, "cause", err.Error())
	}
}

// boot starts the sandbox of c on the first backend that can, records it
// and runs the boot hooks; the caller holds the lock and the lease.
func (s *Service) boot(ctx context.Context, c container.Container) (*live, error) {
	id := c.ID()
	mounts, err := s.prepareBoot(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("containers: folders: %w", err) // logged by hide
	}
	spec := sandbox.Spec{ID: id, Mounts: mounts, Limits: s.cfg.Limits, Env: s.cfg.Env}
	if l, ok, err := s.restore(ctx, c, spec); err != nil || ok {
		return l, err
	}
	var reasons []string
	for i, b := range s.backends {
		if err := b.Available(ctx); err != nil {
			if ctx.Err() != nil {
				// The caller went (a stopped turn): no backend failed.
				return nil, ctx.Err()
			}
			reasons = append(reasons, reason(b, err))
			if i+1 < len(s.backends) {
				s.log.Warn("sandbox backend unavailable, trying the next", "backend", b.Name(), "next", s.backends[i+1].Name(), "reason", err.Error())
			}
			continue
		}
		if name := s.claim(ctx, b, spec); name != "" {
			return s.hold(ctx, c, b, 1, false, name), nil
		}
		if err := b.Ensure(ctx, spec); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			reasons = append(reasons, reason(b, err))
			s.log.Error("sandbox boot failed", "container", id, "backend", b.Name(), "cause", err.Error())
			continue
		}
		return s.hold(ctx, c, b, 1, false, ""), nil
	}
	return nil, fmt.Errorf("%w: no sandbox backend could start a sandbox (%s)", sandbox.ErrUnavailable, strings.Join(reasons, "; ")) // logged by hide
}

// reason names the backend before its error, unless the error does.
func reason(b sandbox.Backend, err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, b.Name()+":") {
		return msg
	}
	return b.Name() + ": " + err.Error()
}

// hold records that this process holds c's running sandbox on b, booted,
// claimed from the warm slot named slot (whose lease it keeps; "" for
// none) or adopted, then runs the boot hooks.
func (s *Service) hold(ctx context.Context, c container.Container, b sandbox.Backend, active int, adopted bool, slot string) *live {
	// The sandbox runs whether or not its caller is still there: its
	// record and its boot hooks (the API bridge) must not fail with the
	// caller's context.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	l := &live{backend: b, lastUsed: s.now(), active: active, slot: slot}
	s.ckpt.begin(c.ID())
	s.startMeter(ctx, c.ID(), l, adopted)
	s.mu.Lock()
	s.running[c.ID()] = l
	s.mu.Unlock()
	if err := s.store.UpdateContainer(ctx, c.Booted(b.Name(), s.leases.Holder(), s.now())); fault.Is(err, fault.NotFound) {
		// Deleted meanwhile (its thread was, while the sandbox booted or
		// was adopted): nobody is to hold it, and no hook is for it. Its
		// lease goes back too: this process would otherwise renew it for
		// as long as it lives, and a container made anew under the same
		// id could boot on no other server.
		s.log.Info("sandbox of a container deleted meanwhile: removing it", "container", c.ID())
		s.mu.Lock()
		delete(s.running, c.ID())
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := b.Remove(rctx, c.ID()); err != nil {
			s.log.Warn("sandbox not removed", "container", c.ID(), "cause", err.Error())
		}
		s.giveBack(c.ID())
		s.dropSlot(l)
		return l
	} else if err != nil {
		s.log.Error("container record not updated", "container", c.ID(), "cause", err.Error())
	}
	for _, f := range s.started {
		f(adopted)
	}
	for _, h := range s.hooks {
		if err := h(ctx, s, c.ID()); err != nil {
			s.log.Warn("sandbox boot hook failed", "container", c.ID(), "backend", b.Name(), "cause", err.Error())
		}
	}
	return l
}

// giveBack releases the container's sandbox lease.
func (s *Service) giveBack(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.leases.Release(ctx, sandboxLease(id)); err != nil {
		s.log.Warn("lease not released", "container", id, "cause", err.Error())
	}
}

func (s *Service) release(l *live) {
	s.mu.Lock()
	l.active--
	l.lastUsed = s.now()
	s.mu.Unlock()
}

// Exec runs cmd in the container's sandbox, booting it when needed. When the
// sandbox died (killed, daemon restarted) the error wraps
// sandbox.ErrUnavailable and the next call boots a fresh one. When the
// sandbox could not be had (refused, failed to boot, the request went
// first) the error is marked sandbox.ErrNotStarted: nothing ran.
func (s *Service) Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error) {
	l, err := s.ensure(ctx, containerID)
	if err != nil {
		return sandbox.Result{}, sandbox.NotStarted(err)
	}
	res, err := l.backend.Exec(ctx, containerID, cmd)
	s.release(l)
	if err != nil {
		err = s.failed(containerID, l, "exec", err)
	}
	return res, err
}

// Start starts a long-lived command in the container's sandbox, booting it
// when needed; sandbox.ErrUnsupported when its backend cannot. As for Exec,
// an error before the sandbox ran is marked sandbox.ErrNotStarted.
func (s *Service) Start(ctx context.Context, containerID string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	l, err := s.ensure(ctx, containerID)
	if err != nil {
		return nil, sandbox.NotStarted(err)
	}
	defer s.release(l)
	sess, err := l.backend.Start(ctx, containerID, cmd, tty)
	if err != nil {
		return nil, s.failed(containerID, l, "start", err)
	}
	return sess, nil
}

// Use runs fn while the container's sandbox runs, for work that goes
// through the sandbox without being a command (a backend whose files live
// in the sandbox, as the kubernetes backend's claims do): it boots the
// sandbox when needed, as Exec does, and keeps it from an idle stop until
// fn returns. fn's own errors come back as they are, so a file's
// file.ErrNotFound stays one; a sandbox that went away (an error wrapping
// sandbox.ErrUnavailable) is forgotten so that the next use boots a fresh
// one.
func (s *Service) Use(ctx context.Context, containerID string, fn func(ctx context.Context) error) error {
	l, err := s.ensure(ctx, containerID)
	if err != nil {
		return err
	}
	err = fn(ctx)
	s.release(l)
	if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrNotFound) {
		return s.failed(containerID, l, "files", err)
	}
	return err
}

// Listen listens on a loopback address inside the container's running
// sandbox, booting it when needed; sandbox.ErrUnsupported when its backend
// cannot forward.
func (s *Service) Listen(ctx context.Context, containerID, addr string) (net.Listener, error) {
	l, _ := s.held(containerID)
	if l == nil {
		var err error
		if l, err = s.ensure(ctx, containerID); err != nil {
			return nil, err
		}
		defer s.release(l)
	}
	ln, err := l.backend.Listen(ctx, containerID, addr)
	if err != nil {
		return nil, s.failed(containerID, l, "listen", err)
	}
	return ln, nil
}

// failed logs a failed operation with an error id and returns the error
// the caller may see (hide) and, when the sandbox is gone (killed, daemon
// restarted), forgets it so the next use boots a fresh one.
func (s *Service) failed(id string, l *live, op string, err error) error {
	if errors.Is(err, sandbox.ErrUnsupported) || errors.Is(err, sandbox.ErrNoSession) || errors.Is(err, context.Canceled) {
		return err
	}
	shown := s.hide(id, op, err, "backend", l.backend.Name())
	if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrNotFound) {
		s.forget(id, l)
	}
	return shown
}

// forget drops this process's hold of a sandbox that is gone: its record
// says idle and its lease is given back.
func (s *Service) forget(id string, l *live) {
	s.mu.Lock()
	gone := s.running[id] == l
	if gone {
		delete(s.running, id)
	}
	s.mu.Unlock()
	if !gone {
		return
	}
	s.ckpt.note(id, "its earlier sandbox ended: it was killed, ran out of memory or its backend lost it")
	s.dropSlot(l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.report(ctx, id, l, true, true)
	if c, err := s.store.Container(ctx, id); err == nil && c.Holder() == s.leases.Holder() {
		_ = s.store.UpdateContainer(ctx, c.Stopped())
	}
	s.giveBack(id)
}

// Restart stops the container's sandbox; the next use boots a fresh one with
// the same files.
func (s *Service) Restart(ctx context.Context, containerID string) error {
	return s.hide(containerID, "restart", s.Stop(ctx, containerID))
}

// Stop shuts the container's sandbox down; its files stay. A sandbox the
// record says runs although no process holds it (an earlier stop of it
// failed, or its server went) is stopped on the backend the record names
// (stopUnheld), and a stop that fails there is the answer: the sandbox may
// still run, and the record is left saying so.
func (s *Service) Stop(ctx context.Context, containerID string) error {
	unlock, err := s.lockFor(ctx, containerID)
	if err != nil {
		return err
	}
	defer unlock()
	lease := func(ctx context.Context, id string) error {
		_, err := s.take(ctx, id)
		return err
	}
	if err := s.stopUnheld(ctx, containerID, lease); err != nil {
		return err
	}
	return s.stopLocked(ctx, containerID)
}

// take makes sure this process holds the container's lease before a stop or
// a removal: one this process runs is its own; otherwise the lease is taken,
// and another live holder is the request's error.
func (s *Service) take(ctx context.Context, id string) (*live, error) {
	if l, _ := s.held(id); l != nil {
		return l, nil
	}
	ok, err := s.leases.Acquire(ctx, sandboxLease(id))
	if err != nil {
		return nil, fmt.Errorf("containers: %w", err)
	}
	if !ok {
		return nil, errElsewhere(id)
	}
	return nil, nil
}

// letGo takes the container's sandbox out of this process's hands for the
// caller to stop or remove: its sandbox time is reported and it is no
// longer running here. It returns the sandbox (nil when none runs here)
// and done, which gives back its warm slot and its lease once the caller
// is through.
func (s *Service) letGo(ctx context.Context, id string) (l *live, done func(), err error) {
	if l, err = s.take(ctx, id); err != nil {
		return nil, nil, err
	}
	s.report(ctx, id, l, true, false)
	s.mu.Lock()
	delete(s.running, id)
	s.mu.Unlock()
	return l, func() {
		s.dropSlot(l)
		s.giveBack(id)
	}, nil
}

func (s *Service) stopLocked(ctx context.Context, id string) error {
	l, done, err := s.letGo(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	if l != nil {
		if err := l.backend.Stop(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("containers: stop: %w", err)
		}
	} else {
		for _, b := range s.backends {
			_ = b.Stop(ctx, id)
		}
	}
	if c, err := s.store.Container(ctx, id); err == nil && c.State() == container.Running {
		_ = s.store.UpdateContainer(ctx, c.Stopped())
	}
	return nil
}

// Remove stops the container's sandbox and deletes its files and record.
func (s *Service) Remove(ctx context.Context, containerID string) error {
	unlock, err := s.lockFor(ctx, containerID)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.removeLocked(ctx, containerID, s.store.DeleteContainer); err != nil {
		return err
	}
	if s.retainer != nil {
		return s.retainer.Forget(ctx, containerID)
	}
	return nil
}

// expire removes c, past its maximum age, as resolve does: once its
// sandbox and files are gone its record goes, leaving a tombstone where
// c keeps one. The record is read again under the lock, so a default
// container made anew meanwhile is not taken for the one listed; ok is
// false when the record is gone or no longer past its maximum age.
func (s *Service) expire(ctx context.Context, c container.Container) (ok bool, err error) {
	defer s.lock(c.ID())()
	cur, err := s.store.Container(ctx, c.ID())
	if fault.Is(err, fault.NotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("containers: %w", err)
	}
	if !cur.Expired(s.now(), s.cfg.MaxAge) {
		return false, nil
	}
	return true, s.expireLocked(ctx, cur)
}

// expireLocked removes c, past its maximum age; the caller holds its lock.
// The retainer keeps its output files first: a failure leaves c for the
// next sweep.
func (s *Service) expireLocked(ctx context.Context, c container.Container) error {
	if s.retainer != nil {
		skipped, err := s.retainer.Retain(ctx, c.ID(), c.OrgID(), c.OwnerID())
		if err != nil {
			return fmt.Errorf("containers: retain outputs: %w", err)
		}
		if len(skipped) > 0 {
			s.log.Warn("outputs not retained: stored whole, they would pass the server's cap or the org's storage quota", "container", c.ID(), "org", c.OrgID(), "paths", skipped)
		}
	}
	return s.removeLocked(ctx, c.ID(), func(ctx context.Context, id string) error {
		if !c.KeepsTombstone() {
			return s.store.DeleteContainer(ctx, id)
		}
		return s.store.ExpireContainer(ctx, c.Tombstone(s.now()))
	})
}

// removeLocked stops the container's sandbox, deletes its files and then
// its record with forget; the caller holds its lock.
func (s *Service) removeLocked(ctx context.Context, id string, forget func(ctx context.Context, id string) error) error {
	l, done, err := s.letGo(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	if l != nil {
		_ = l.backend.Remove(ctx, id)
	} else {
		for _, b := range s.backends {
			_ = b.Remove(ctx, id)
		}
	}
	if s.ckpt.folders != nil {
		if err := s.ckpt.folders.DropCheckpoint(ctx, id); err != nil {
			return fmt.Errorf("containers: remove the checkpoint: %w", err)
		}
		if err := s.ckpt.folders.DropFiles(ctx, id); err != nil {
			return fmt.Errorf("containers: remove the checkpoints' files: %w", err)
		}
	}
	if err := s.folders.Remove(ctx, id); err != nil {
		return fmt.Errorf("containers: remove folders: %w", err)
	}
	if err := forget(ctx, id); err != nil && !fault.Is(err, fault.NotFound) {
		return fmt.Errorf("containers: remove: %w", err)
	}
	return nil
}

// Running reports whether this process holds a booted sandbox of the
// container.
func (s *Service) Running(containerID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[containerID] != nil
}

// StopIdle shuts down every sandbox this process holds that was unused for
// the idle period and runs no command, checkpointing it first where its
// backend can (the next use restores it); it returns the container ids
// stopped.
func (s *Service) StopIdle(ctx context.Context) []string {
	cutoff := s.now().Add(-s.cfg.Idle)
	return s.suspendEach(ctx, func(l *live) bool { return l.active == 0 && l.lastUsed.Before(cutoff) }, false)
}

// suspendEach suspends (checkpoints where it can, and stops) each sandbox
// this process holds that pick chooses, checked again under its
// container's lock, and returns the containers suspended. With
// checkpointed, only the sandboxes whose backend checkpoints are
// suspended, and only those whose checkpoint was saved are returned. pick
// is called with s.mu held.
func (s *Service) suspendEach(ctx context.Context, pick func(*live) bool, checkpointed bool) []string {
	s.mu.Lock()
	var ids []string
	for id, l := range s.running {
		if pick(l) {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	var done []string
	for _, id := range ids {
		unlock := s.lock(id)
		s.mu.Lock()
		l := s.running[id]
		still := l != nil && pick(l)
		s.mu.Unlock()
		if still && (!checkpointed || l.backend.Checkpoints(ctx).Supported) {
			if saved, err := s.suspendLocked(ctx, id); err == nil && (saved || !checkpointed) {
				done = append(done, id)
			}
		}
		unlock()
	}
	return done
}

// dropSlot gives back the lease of the warm slot a sandbox was claimed
// from, once it no longer runs (nil and unclaimed sandboxes have none).
func (s *Service) dropSlot(l *live) {
	if l == nil {
		return
	}
	s.mu.Lock()
	name := l.slot
	l.slot = ""
	s.mu.Unlock()
	if name != "" {
		s.giveBackSlot(name)
	}
}
