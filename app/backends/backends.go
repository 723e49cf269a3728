// Package backends is the capability matrix use case: for each configured
// sandbox backend, in SANDBOX_BACKEND order, whether it can serve now (and
// why not), its isolation level and the limits it enforces on this host.
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

// Entry is one row of the matrix.
type Entry struct {
	Name      string
	Primary   bool // first in the configured list
	Available bool
	Reason    string // why the backend cannot serve, when it cannot
	Isolation string
	Limits    []string
	Mechanism string
}

// Service computes the matrix over the configured backends.
type Service struct {
	backends []sandbox.Backend
	deadline time.Duration
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
	out := make([]Entry, len(s.backends))
	var wg sync.WaitGroup
	for i, b := range s.backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.describe(ctx, b)
			out[i].Primary = i == 0
		}()
	}
	wg.Wait()
	return out, nil
}

func (s *Service) describe(ctx context.Context, b sandbox.Backend) Entry {
	ctx, cancel := context.WithTimeout(ctx, s.deadline)
	defer cancel()
	e := Entry{Name: b.Name(), Isolation: IsolationUnknown, Limits: []string{}}
	if err := b.Available(ctx); err != nil {
		e.Reason = err.Error()
	} else {
		e.Available = true
	}
	if iso := b.Isolation(); iso != "" {
		e.Isolation = iso
	}
	if l, m := b.EnforcedLimits(ctx); l != nil {
		e.Limits, e.Mechanism = l, m
	}
	return e
}
