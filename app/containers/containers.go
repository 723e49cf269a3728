// Package containers manages named sandbox scopes: it resolves the container
// a request names (namespaced per user, or a thread's), boots its sandbox on
// first use on the first backend that can serve, shuts idle sandboxes down
// (files stay), and removes containers past their maximum age.
package containers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// Prepare makes the folders exist and returns their §2 mounts.
	Prepare(ctx context.Context, containerID string) ([]sandbox.Mount, error)
	// Remove deletes the container's folders.
	Remove(ctx context.Context, containerID string) error
}

// Config tunes the manager.
type Config struct {
	Idle   time.Duration // idle time before a sandbox is shut down (default 5m)
	MaxAge time.Duration // hard maximum age of a container (default 30 days)
	Limits sandbox.Limits
	Env    []string // set for every sandbox
}

// Service is the container manager. It implements the sandbox executor the
// tool loop consumes.
type Service struct {
	store    container.Repository
	backends []sandbox.Backend
	folders  Folders
	threads  Threads
	quota    Quota // optional (SetQuota)
	cfg      Config
	log      *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	running map[string]*live // by container id
	locks   map[string]*sync.Mutex
}

// live is a booted sandbox and the backend that serves it.
type live struct {
	backend  sandbox.Backend
	lastUsed time.Time
	active   int
}

// New returns a manager over backends, tried in order.
func New(store container.Repository, backends []sandbox.Backend, folders Folders, cfg Config, log *slog.Logger) *Service {
	if cfg.Idle <= 0 {
		cfg.Idle = 5 * time.Minute
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 30 * 24 * time.Hour
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, backends: backends, folders: folders, cfg: cfg, log: log, now: time.Now,
		running: map[string]*live{}, locks: map[string]*sync.Mutex{}}
}

// Idle returns the idle shutdown period.
func (s *Service) Idle() time.Duration { return s.cfg.Idle }

// MaxAge returns the hard maximum age.
func (s *Service) MaxAge() time.Duration { return s.cfg.MaxAge }

// ExpiresAt is the rolling expiry of c shown to clients.
func (s *Service) ExpiresAt(c container.Container) time.Time {
	return c.ExpiresAt(s.cfg.Idle, s.cfg.MaxAge)
}

// ForUser resolves the caller's container named clientID ("" means the
// default container), creating it when new. A container past its maximum
// age is removed; naming it fails, except the default container, which is
// made anew.
func (s *Service) ForUser(ctx context.Context, p user.Principal, clientID string) (container.Container, error) {
	isDefault := clientID == ""
	if isDefault {
		clientID = container.DefaultClientID
	}
	if err := container.ValidateClientID(clientID); err != nil {
		return container.Container{}, err
	}
	return s.resolve(ctx, container.UserScopedID(p.UserID, clientID), isDefault, func() (container.Container, error) {
		return container.NewForUser(p.OrgID, p.UserID, clientID, s.now())
	}, p)
}

// ForThread resolves the container of a thread the caller may access (the
// caller has checked that), creating it when new.
func (s *Service) ForThread(ctx context.Context, p user.Principal, threadID string) (container.Container, error) {
	return s.resolve(ctx, threadID, false, func() (container.Container, error) {
		return container.NewForThread(p.OrgID, p.UserID, threadID, s.now())
	}, p)
}

// Lookup returns the container with storage id if the caller may use it.
func (s *Service) Lookup(ctx context.Context, p user.Principal, id string) (container.Container, error) {
	c, err := s.store.Container(ctx, id)
	if err != nil || !c.AccessibleBy(p.OrgID, p.UserID) {
		return container.Container{}, fault.New(fault.NotFound, "container not found")
	}
	return c, nil
}

func (s *Service) resolve(ctx context.Context, id string, recreate bool, mk func() (container.Container, error), p user.Principal) (container.Container, error) {
	defer s.lock(id)()
	c, err := s.store.Container(ctx, id)
	switch {
	case fault.Is(err, fault.NotFound):
		if c, err = mk(); err != nil {
			return container.Container{}, err
		}
		if err := s.beforeCreate(ctx, c); err != nil {
			return container.Container{}, err
		}
		if err := s.store.CreateContainer(ctx, c); err != nil {
			return container.Container{}, fmt.Errorf("containers: create: %w", err)
		}
		return c, nil
	case err != nil:
		return container.Container{}, fmt.Errorf("containers: %w", err)
	}
	if !c.AccessibleBy(p.OrgID, p.UserID) {
		return container.Container{}, fault.New(fault.NotFound, "container not found")
	}
	if c.Expired(s.now(), s.cfg.MaxAge) {
		if err := s.removeLocked(ctx, c.ID()); err != nil {
			return container.Container{}, err
		}
		if !recreate {
			return container.Container{}, errExpired(c.ClientID())
		}
		if c, err = mk(); err != nil {
			return container.Container{}, err
		}
		if err := s.beforeCreate(ctx, c); err != nil {
			return container.Container{}, err
		}
		if err := s.store.CreateContainer(ctx, c); err != nil {
			return container.Container{}, fmt.Errorf("containers: create: %w", err)
		}
	}
	return c, nil
}

// Quota checks the org policy's quotas (app/quota.Service). A refusal is
// returned as is: it names the quota and has its fault kind.
type Quota interface {
	// BeforeCreate refuses a new container for the user.
	BeforeCreate(ctx context.Context, orgID, userID string) error
	// BeforeBoot refuses booting one more sandbox for the user.
	BeforeBoot(ctx context.Context, orgID, userID string) error
}

// SetQuota makes the manager ask q before it records a new container and
// before it boots a sandbox. Call it once while wiring.
func (s *Service) SetQuota(q Quota) { s.quota = q }

// beforeCreate asks the quota whether c's owner may have one more container.
func (s *Service) beforeCreate(ctx context.Context, c container.Container) error {
	if s.quota == nil {
		return nil
	}
	return s.quota.BeforeCreate(ctx, c.OrgID(), c.OwnerID())
}

// beforeBoot asks the quota whether the owner of container id may boot one
// more sandbox. A record still saying running (its sandbox died, or the
// server restarted) is set idle first: no sandbox of this manager runs for
// it, and it must not count against its own boot.
func (s *Service) beforeBoot(ctx context.Context, id string) error {
	if s.quota == nil {
		return nil
	}
	c, err := s.store.Container(ctx, id)
	if err != nil {
		return fmt.Errorf("containers: quota: %w", err)
	}
	if c.State() == container.Running {
		if err := s.store.UpdateContainer(ctx, c.WithState(container.Idle)); err != nil {
			return fmt.Errorf("containers: quota: %w", err)
		}
	}
	return s.quota.BeforeBoot(ctx, c.OrgID(), c.OwnerID())
}

// errExpired is the answer to a request naming a container past its
// maximum age (which removes it with its files).
func errExpired(clientID string) error {
	return fault.Errorf(fault.NotFound, "container %q has passed its maximum age and is removed with its files; send the request without a container to get a new one", clientID)
}

// Touch records a use of the container now, rolling its expiry forward.
func (s *Service) Touch(ctx context.Context, c container.Container) (container.Container, error) {
	c = c.Touch(s.now())
	return c, s.store.UpdateContainer(ctx, c)
}

func (s *Service) lock(id string) func() {
	s.mu.Lock()
	m, ok := s.locks[id]
	if !ok {
		m = &sync.Mutex{}
		s.locks[id] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// ensure boots the container's sandbox unless one runs, trying each backend
// in order, and marks it in use.
func (s *Service) ensure(ctx context.Context, id string) (*live, error) {
	defer s.lock(id)()
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
		return nil, ErrNoBackend
	}
	if err := s.beforeBoot(ctx, id); err != nil {
		return nil, err
	}
	mounts, err := s.folders.Prepare(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("containers: folders: %w", err)
	}
	spec := sandbox.Spec{ID: id, Mounts: mounts, Limits: s.cfg.Limits, Env: s.cfg.Env}
	var reasons []string
	for i, b := range s.backends {
		if err := b.Available(ctx); err != nil {
			reasons = append(reasons, b.Name()+": "+err.Error())
			if i+1 < len(s.backends) {
				s.log.Warn("sandbox backend unavailable, trying the next", "backend", b.Name(), "next", s.backends[i+1].Name(), "reason", err.Error())
			}
			continue
		}
		if err := b.Ensure(ctx, spec); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			reasons = append(reasons, b.Name()+": "+err.Error())
			if i+1 < len(s.backends) {
				s.log.Warn("sandbox backend could not start a sandbox, trying the next", "backend", b.Name(), "next", s.backends[i+1].Name(), "container", id, "reason", err.Error())
			}
			continue
		}
		l = &live{backend: b, lastUsed: s.now(), active: 1}
		s.mu.Lock()
		s.running[id] = l
		s.mu.Unlock()
		c, err := s.store.Container(ctx, id)
		if err == nil {
			_ = s.store.UpdateContainer(ctx, c.WithState(container.Running).Touch(s.now()))
		}
		return l, nil
	}
	return nil, fmt.Errorf("%w: no sandbox backend could start a sandbox (%s)", sandbox.ErrUnavailable, strings.Join(reasons, "; "))
}

func (s *Service) release(l *live) {
	s.mu.Lock()
	l.active--
	l.lastUsed = s.now()
	s.mu.Unlock()
}

// ErrNoBackend reports that no sandbox backend is configured.
var ErrNoBackend = errors.New("code_execution provider is not configured.")

// Exec runs cmd in the container's sandbox, booting it when needed. When the
// sandbox died (killed, daemon restarted) the error wraps
// sandbox.ErrUnavailable and the next call boots a fresh one.
func (s *Service) Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error) {
	l, err := s.ensure(ctx, containerID)
	if err != nil {
		return sandbox.Result{}, err
	}
	res, err := l.backend.Exec(ctx, containerID, cmd)
	s.release(l)
	if err != nil && (errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrNotFound)) {
		s.forget(containerID, l)
	}
	return res, err
}

// Backend returns the backend serving the container's sandbox, booting it.
func (s *Service) Backend(ctx context.Context, containerID string) (sandbox.Backend, func(), error) {
	l, err := s.ensure(ctx, containerID)
	if err != nil {
		return nil, nil, err
	}
	return l.backend, func() { s.release(l) }, nil
}

func (s *Service) forget(id string, l *live) {
	s.mu.Lock()
	if s.running[id] == l {
		delete(s.running, id)
	}
	s.mu.Unlock()
}

// Restart stops the container's sandbox; the next use boots a fresh one with
// the same files.
func (s *Service) Restart(ctx context.Context, containerID string) error {
	return s.Stop(ctx, containerID)
}

// Stop shuts the container's sandbox down; its files stay.
func (s *Service) Stop(ctx context.Context, containerID string) error {
	defer s.lock(containerID)()
	return s.stopLocked(ctx, containerID)
}

func (s *Service) stopLocked(ctx context.Context, id string) error {
	s.mu.Lock()
	l := s.running[id]
	delete(s.running, id)
	s.mu.Unlock()
	if l != nil {
		if err := l.backend.Stop(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("containers: stop: %w", err)
		}
	}
	if c, err := s.store.Container(ctx, id); err == nil && c.State() == container.Running {
		_ = s.store.UpdateContainer(ctx, c.WithState(container.Idle))
	}
	return nil
}

// Remove stops the container's sandbox and deletes its files and record.
func (s *Service) Remove(ctx context.Context, containerID string) error {
	defer s.lock(containerID)()
	return s.removeLocked(ctx, containerID)
}

func (s *Service) removeLocked(ctx context.Context, id string) error {
	s.mu.Lock()
	l := s.running[id]
	delete(s.running, id)
	s.mu.Unlock()
	if l != nil {
		_ = l.backend.Remove(ctx, id)
	} else {
		for _, b := range s.backends {
			_ = b.Remove(ctx, id)
		}
	}
	if err := s.folders.Remove(ctx, id); err != nil {
		return fmt.Errorf("containers: remove folders: %w", err)
	}
	if err := s.store.DeleteContainer(ctx, id); err != nil && !fault.Is(err, fault.NotFound) {
		return fmt.Errorf("containers: remove: %w", err)
	}
	return nil
}

// Running reports whether the container has a booted sandbox.
func (s *Service) Running(containerID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[containerID] != nil
}

// StopIdle shuts down every sandbox unused for the idle period and not
// running a command; it returns the container ids stopped.
func (s *Service) StopIdle(ctx context.Context) []string {
	cutoff := s.now().Add(-s.cfg.Idle)
	s.mu.Lock()
	var idle []string
	for id, l := range s.running {
		if l.active == 0 && l.lastUsed.Before(cutoff) {
			idle = append(idle, id)
		}
	}
	s.mu.Unlock()
	var stopped []string
	for _, id := range idle {
		unlock := s.lock(id)
		s.mu.Lock()
		l := s.running[id]
		still := l != nil && l.active == 0 && l.lastUsed.Before(cutoff)
		s.mu.Unlock()
		if still {
			if err := s.stopLocked(ctx, id); err == nil {
				stopped = append(stopped, id)
			}
		}
		unlock()
	}
	return stopped
}

// Run stops idle sandboxes periodically until ctx ends, then stops them all.
func (s *Service) Run(ctx context.Context) {
	every := s.cfg.Idle / 5
	if every > 30*time.Second {
		every = 30 * time.Second
	}
	if every < 100*time.Millisecond {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, id := range s.StopIdle(ctx) {
				s.log.Info("sandbox stopped for idleness; files kept", "container", id)
			}
		}
	}
}
