// Package backends is the capability matrix use case: for each configured
// sandbox backend, in SANDBOX_BACKEND order, whether it can serve now (and
// why not), its isolation level, the limits it enforces on this host and
// whether it checkpoints sandboxes (or keeps files only, and why).
// Everything is asked of the backends at the time of the request; nothing
// is hard-coded here.
package backends

import (
	"context"
	"sync"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// Isolation levels, strongest first.
const (
	IsolationMicroVM         = "microVM"
	IsolationAppKernel       = "application kernel"
	IsolationNamespaces      = "namespaces"
	IsolationProcessJail     = "process jail"
	IsolationUnknown         = "unknown"
	defaultAvailableDeadline = 10 * time.Second
)

// Warner is implemented by backends that must not run untrusted code (the
// local development jail). Warning says so in one sentence; the matrix
// shows it in the backend's row and the server logs it at start.
type Warner interface {
	Warning() string
}

// Entry is one row of the matrix.
type Entry struct {
	Name      string
	Primary   bool // first in the configured list
	Available bool
	Reason    string // why the backend cannot serve, when it cannot
	Isolation string
	Limits    []string
	Mechanism string
	Warning   string // what the backend must not be used for (Warner), or empty
	WarmPool  *WarmPool
	// Checkpoint says whether the backend saves a sandbox's running state
	// at a stop and restores it at the next use, or keeps files only and
	// why.
	Checkpoint sandbox.CheckpointSupport
}

// WarmPool is a backend's pool of warm sandboxes (booted before a
// container claims one): how many it keeps, how many are ready, and why it
// keeps none or fewer.
type WarmPool struct {
	Size  int
	Ready int
	Note  string
}

// Status is whether one configured backend can serve now, and why not.
type Status struct {
	Name      string
	Available bool
	Reason    string
}

// Service computes the matrix over the configured backends.
type Service struct {
	backends []sandbox.Backend
	deadline time.Duration
	warm     func(backend string) WarmPool
}

// WithWarmPool makes each row show the backend's warm pool, as warm
// reports it (the sandboxes' owner keeps the pool). Call it while wiring.
func (s *Service) WithWarmPool(warm func(backend string) WarmPool) *Service {
	s.warm = warm
	return s
}

// New returns the use case over backends in configured order.
func New(backends []sandbox.Backend) *Service {
	return &Service{backends: backends, deadline: defaultAvailableDeadline}
}

// Matrix returns one entry per configured backend. Only org admins may see it.
func (s *Service) Matrix(ctx context.Context, p user.Principal) ([]Entry, error) {
	if !p.IsAdmin() {
		return nil, fault.New(fault.Forbidden, "only organization admins may view the sandbox backends")
	}
	return atOnce(s.backends, func(i int, b sandbox.Backend) Entry {
		e := s.describe(ctx, b)
		e.Primary = i == 0
		return e
	}), nil
}

// atOnce asks every backend with ask at the same time and returns the
// answers in configured order.
func atOnce[T any](backends []sandbox.Backend, ask func(i int, b sandbox.Backend) T) []T {
	out := make([]T, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() { out[i] = ask(i, b) })
	}
	wg.Wait()
	return out
}

// Check asks every configured backend, at once, whether it can serve, for
// the readiness probe; it needs no principal and describes nothing else.
// ready is false only when backends are configured and none is available:
// code execution is core, and a server with no backend cannot run any.
// With no backend configured (code execution off) it is true.
func (s *Service) Check(ctx context.Context) (statuses []Status, ready bool) {
	out := atOnce(s.backends, func(_ int, b sandbox.Backend) Status { return s.status(ctx, b) })
	ready = len(out) == 0
	for _, st := range out {
		ready = ready || st.Available
	}
	return out, ready
}

// status asks one backend, within the service's deadline.
func (s *Service) status(ctx context.Context, b sandbox.Backend) Status {
	ctx, cancel := context.WithTimeout(ctx, s.deadline)
	defer cancel()
	st := Status{Name: b.Name()}
	if err := b.Available(ctx); err != nil {
		st.Reason = err.Error()
	} else {
		st.Available = true
	}
	return st
}

func (s *Service) describe(ctx context.Context, b sandbox.Backend) Entry {
	st := s.status(ctx, b)
	ctx, cancel := context.WithTimeout(ctx, s.deadline)
	defer cancel()
	e := Entry{Name: st.Name, Available: st.Available, Reason: st.Reason, Isolation: IsolationUnknown, Limits: []string{}}
	if w, ok := b.(Warner); ok {
		e.Warning = w.Warning()
	}
	if iso := b.Isolation(); iso != "" {
		e.Isolation = iso
	}
	if l, m := b.EnforcedLimits(ctx); l != nil {
		e.Limits, e.Mechanism = l, m
	}
	e.Checkpoint = b.Checkpoints(ctx)
	if s.warm != nil {
		w := s.warm(b.Name())
		e.WarmPool = &w
	}
	return e
}
