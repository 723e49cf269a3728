// Package unsupported holds the sandbox backends the contract names that
// run on a provider's service this build does not call (e2b, superserve,
// blaxel), and stands in for a
// configured backend that could not even be set up (Broken). Each one is a
// sandbox.Backend whose every call fails with an error naming the backend
// and what it needs, so a SANDBOX_BACKEND list that names one falls through
// to the next with a clear log line, and the capability matrix and the
// readiness probe list it as unavailable with that reason.
package unsupported

import (
	"context"
	"errors"
	"fmt"
	"net"

	"threadbox/domain/sandbox"
)

// needs says, per backend name, what the backend would need to run.
var needs = map[string]struct{ isolation, needs string }{
	"e2b":        {"microVM", "the provider's service: an E2B account and API key and outbound network access to E2B, which this build does not call"},
	"superserve": {"microVM", "the provider's service: a Superserve account and API key and outbound network access to Superserve, which this build does not call"},
	"blaxel":     {"microVM", "the provider's service: a Blaxel account and API key and outbound network access to Blaxel, which this build does not call"},
}

// ErrUnsupported is wrapped by every error of an unsupported backend.
var ErrUnsupported = errors.New("not available")

// Backend is a named backend that cannot serve.
type Backend struct {
	name string
	err  error
}

// New returns the placeholder for name ("e2b", "superserve", "blaxel").
func New(name string) (*Backend, error) {
	n, ok := needs[name]
	if !ok {
		return nil, fmt.Errorf("unsupported: unknown backend %q", name)
	}
	return &Backend{name: name, err: fmt.Errorf("%s: %w: needs %s", name, ErrUnsupported, n.needs)}, nil
}

// Broken returns a stand-in for the configured backend name that could not
// be set up (a Docker client that cannot be made, say): unavailable, every
// call failing with err, which should name the backend.
func Broken(name string, err error) *Backend {
	return &Backend{name: name, err: err}
}

// Names lists the backends this package stands in for.
func Names() []string { return []string{"e2b", "superserve", "blaxel"} }

// Name returns the backend's configuration name.
func (b *Backend) Name() string { return b.name }

// Isolation returns the isolation level the backend would give ("unknown"
// for a Broken one).
func (b *Backend) Isolation() string {
	if n, ok := needs[b.name]; ok {
		return n.isolation
	}
	return "unknown"
}

// EnforcedLimits reports that no limit is enforced: the backend cannot run.
func (b *Backend) EnforcedLimits(context.Context) ([]string, string) { return nil, "" }

// Available returns why the backend cannot serve.
func (b *Backend) Available(context.Context) error { return b.err }

// Ensure fails: no sandbox can be started.
func (b *Backend) Ensure(context.Context, sandbox.Spec) error {
	return fmt.Errorf("%w: %w", sandbox.ErrUnavailable, b.err)
}

// Exec fails: no sandbox runs.
func (b *Backend) Exec(context.Context, string, sandbox.Command) (sandbox.Result, error) {
	return sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, b.err)
}

// Start fails: no sandbox runs.
func (b *Backend) Start(context.Context, string, sandbox.Command, *sandbox.TTY) (sandbox.Session, error) {
	return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, b.err)
}

// Listen fails: no sandbox runs.
func (b *Backend) Listen(context.Context, string, string) (net.Listener, error) {
	return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, b.err)
}

// Reconcile finds nothing: no sandbox ever ran.
func (b *Backend) Reconcile(context.Context, func(string) sandbox.Verdict) (adopted, removed []string, err error) {
	return nil, nil, nil
}

// Stop does nothing: no sandbox runs.
func (b *Backend) Stop(context.Context, string) error { return nil }

// Remove does nothing: no sandbox runs.
func (b *Backend) Remove(context.Context, string) error { return nil }

// Status reports every sandbox missing.
func (b *Backend) Status(context.Context, string) (sandbox.Status, error) {
	return sandbox.Status{State: sandbox.StateMissing}, nil
}

var _ sandbox.Backend = (*Backend)(nil)

// Warm fails: no sandbox runs.
func (b *Backend) Warm(context.Context, sandbox.Spec) error {
	return fmt.Errorf("%w: %w", sandbox.ErrUnsupported, b.err)
}

// Claim fails: no sandbox runs.
func (b *Backend) Claim(context.Context, string, sandbox.Spec) error {
	return fmt.Errorf("%w: %w", sandbox.ErrUnsupported, b.err)
}

// WarmSandboxes fails: no sandbox runs.
func (b *Backend) WarmSandboxes(context.Context) ([]string, error) {
	return nil, fmt.Errorf("%w: %w", sandbox.ErrUnsupported, b.err)
}
