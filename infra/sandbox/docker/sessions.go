package docker

import (
	"context"
	"fmt"
	"net"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

var (
	_ sandbox.Backend = (*Backend)(nil)
)

// sessionAgent is what an agent connection offers beyond Agent for
// long-lived commands and loopback listeners; *agent.Client has it.
type sessionAgent interface {
	Session(ctx context.Context, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error)
	Listen(ctx context.Context, addr string) (*agent.Listener, error)
}

func (b *Backend) sessionAgent(id string) (sessionAgent, error) {
	bx := b.live(id)
	if bx == nil {
		return nil, fmt.Errorf("docker: %s: %w: sandbox is not running", id, sandbox.ErrUnavailable)
	}
	sa, ok := bx.agent.(sessionAgent)
	if !ok {
		return nil, fmt.Errorf("docker: %s: %w: the agent connection cannot start sessions", id, sandbox.ErrUnavailable)
	}
	return sa, nil
}

// Start starts a long-lived command whose output is streamed to
// cmd.Output and not kept.
func (b *Backend) Start(ctx context.Context, id string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	sa, err := b.sessionAgent(id)
	if err != nil {
		return nil, err
	}
	p, err := sa.Session(ctx, cmd, tty)
	if err != nil {
		return nil, fmt.Errorf("docker: start in %s: %w", id, err)
	}
	return p, nil
}

// Listen listens on a loopback address inside the sandbox and hands each
// connection to the host.
func (b *Backend) Listen(ctx context.Context, id, addr string) (net.Listener, error) {
	sa, err := b.sessionAgent(id)
	if err != nil {
		return nil, err
	}
	l, err := sa.Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("docker: listen in %s: %w", id, err)
	}
	return l, nil
}
