package boxes

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

// Agent is the host end of a sandbox's agent connection; *agent.Client
// has it.
type Agent interface {
	Exec(ctx context.Context, cmd sandbox.Command) (sandbox.Result, error)
	Ping(ctx context.Context) error
	Session(ctx context.Context, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error)
	Listen(ctx context.Context, addr string) (*agent.Listener, error)
	// Done is closed when the connection has ended (keepalive: the
	// sandbox is hung, or it went).
	Done() <-chan struct{}
}

// NewAgent is a backend's agent client over a sandbox's connection: it
// gives up when the agent has not answered a ping for 10 s.
func NewAgent(rw io.ReadWriteCloser) *agent.Client {
	return agent.NewClient(rw, agent.WithKeepalive(15*time.Second, 10*time.Second))
}

// Box is a running sandbox as a Set keeps it.
type Box interface {
	// Kill ends the sandbox, or at least its agent connection; Done is
	// closed once it has gone.
	Kill()
	// Agent returns its agent connection.
	Agent() Agent
	// Done is closed when the sandbox has ended.
	Done() <-chan struct{}
	// StartedAt returns when it booted.
	StartedAt() time.Time
	// OOMKills counts the kernel's memory kills in the sandbox; ok is
	// false when they are not counted. Once the sandbox has ended it
	// returns the count it had then (a rise around a command tells that
	// the sandbox ran out of memory under it).
	OOMKills() (n int64, ok bool)
	// Why says what else is known of why the sandbox, which has ended,
	// went ("pod deleted", "container ended (exit code 137)"), or "".
	Why() string
	// CPUTime reads the CPU time the sandbox has used since it booted, as
	// the host's control group counts it (every process in it); an error
	// wrapping sandbox.ErrUnsupported (ErrCPUNotCounted) when nothing
	// counts it.
	CPUTime(ctx context.Context) (time.Duration, error)
}

// ErrCPUNotCounted is CPUTime's error for a sandbox whose control group
// cannot be read.
var ErrCPUNotCounted = fmt.Errorf("%w: its control group cannot be read", sandbox.ErrUnsupported)

// Ops are the calls of sandbox.Backend that go through a running box's
// agent: a backend embeds them, and declares those it answers otherwise.
type Ops[B Box] struct {
	set     *Set[B]
	missing func(ctx context.Context, id string) bool
}

// NewOps returns the calls over set's boxes. Of an id with no running box,
// missing(ctx, id) tells whether its sandbox does not exist rather than
// being stopped; nil takes an id the set never held for missing.
func NewOps[B Box](set *Set[B], missing func(ctx context.Context, id string) bool) Ops[B] {
	return Ops[B]{set: set, missing: missing}
}

// outOfMemory is how a sandbox's end is said when its memory kills rose
// under the command.
const outOfMemory = "out of memory"

// Exec runs cmd through the agent of id's running box; of an id with none,
// the error wraps sandbox.ErrNotFound when its sandbox does not exist and
// sandbox.ErrUnavailable when it is stopped. A command that failed
// while the sandbox's memory kills rose is marked OOMKilled. When the
// sandbox ends under the command, the error wraps sandbox.ErrUnavailable
// and says why (out of memory when its kills rose since the command
// began); the next Ensure boots a fresh one.
func (o Ops[B]) Exec(ctx context.Context, id string, cmd sandbox.Command) (sandbox.Result, error) {
	s := o.set
	bx, ok := s.Live(id)
	if !ok {
		if o.missing == nil && !s.Known(id) || o.missing != nil && o.missing(ctx, id) {
			return sandbox.Result{}, fmt.Errorf("%s: exec %s: %w", s.name, id, sandbox.ErrNotFound)
		}
		return sandbox.Result{}, fmt.Errorf("%s: exec %s: %w: sandbox is not running", s.name, id, sandbox.ErrUnavailable)
	}
	before, counted := bx.OOMKills()
	res, err := bx.Agent().Exec(ctx, cmd)
	if err == nil {
		if res.ExitCode != 0 && !res.OOMKilled && counted {
			if n, ok := bx.OOMKills(); ok && n > before {
				res.OOMKilled = true
			}
		}
		return res, nil
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("%s: exec %s: %w", s.name, id, err)
	}
	// Did the sandbox end under the command? Its end shows a moment after.
	select {
	case <-bx.Done():
	case <-bx.Agent().Done():
	case <-time.After(500 * time.Millisecond):
	}
	if !ended(bx) {
		return res, fmt.Errorf("%s: exec %s: %w", s.name, id, err)
	}
	// Why it went (a memory kill) is known once it is gone.
	select {
	case <-bx.Done():
	case <-time.After(2 * time.Second):
	}
	why := "sandbox ended"
	w := bx.Why()
	if counted && !strings.Contains(w, outOfMemory) {
		if n, ok := bx.OOMKills(); ok && n > before {
			why += ": " + outOfMemory + " (the sandbox's memory limit was reached and the kernel killed it)"
		}
	}
	if w != "" {
		why += ": " + w
	}
	return res, fmt.Errorf("%s: exec %s: %w: %s: %w", s.name, id, sandbox.ErrUnavailable, why, err)
}

// Start starts a long-lived command in id's running sandbox whose output
// is streamed to cmd.Output and not kept.
func (o Ops[B]) Start(ctx context.Context, id string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	s := o.set
	bx, ok := s.Live(id)
	if !ok {
		return nil, fmt.Errorf("%s: start in %s: %w: sandbox is not running", s.name, id, sandbox.ErrUnavailable)
	}
	p, err := bx.Agent().Session(ctx, cmd, tty)
	if err != nil {
		return nil, fmt.Errorf("%s: start in %s: %w", s.name, id, err)
	}
	return p, nil
}

// Listen listens on a loopback address inside id's running sandbox (its
// own network) and hands each connection to the host.
func (o Ops[B]) Listen(ctx context.Context, id, addr string) (net.Listener, error) {
	s := o.set
	bx, ok := s.Live(id)
	if !ok {
		return nil, fmt.Errorf("%s: listen in %s: %w: sandbox is not running", s.name, id, sandbox.ErrUnavailable)
	}
	l, err := bx.Agent().Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen in %s: %w", s.name, id, err)
	}
	return l, nil
}

// SandboxCPU reports the CPU time id's running sandbox has used since it
// booted (Box.CPUTime); sandbox.ErrNotFound when none runs here.
func (o Ops[B]) SandboxCPU(ctx context.Context, id string) (time.Duration, error) {
	bx, ok := o.set.Live(id)
	if !ok {
		return 0, fmt.Errorf("%s: cpu %s: %w", o.set.name, id, sandbox.ErrNotFound)
	}
	d, err := bx.CPUTime(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: cpu %s: %w", o.set.name, id, err)
	}
	return d, nil
}

// Stop ends id's sandbox under id's lock (Set.Stop); its files stay.
func (o Ops[B]) Stop(ctx context.Context, id string) error {
	defer o.set.Lock(id)()
	return o.set.Stop(ctx, id)
}

// Status reports id's state as the set knows it: running, stopped (held
// before) or missing.
func (o Ops[B]) Status(ctx context.Context, id string) (sandbox.Status, error) {
	if bx, ok := o.set.Live(id); ok {
		return sandbox.Status{State: sandbox.StateRunning, StartedAt: bx.StartedAt()}, nil
	}
	if o.set.Known(id) {
		return sandbox.Status{State: sandbox.StateStopped}, nil
	}
	return sandbox.Status{State: sandbox.StateMissing}, nil
}
