package local

import (
	"context"
	"fmt"
	"net"

	"threadbox/domain/sandbox"
)

var (
	_ sandbox.Backend = (*Backend)(nil)
)

// Start starts a long-lived command in the jail whose output is streamed
// to cmd.Output and not kept.
func (b *Backend) Start(ctx context.Context, id string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	j := b.live(id)
	if j == nil {
		return nil, fmt.Errorf("local: start in %s: %w: sandbox is not running", id, sandbox.ErrUnavailable)
	}
	p, err := j.client.Session(ctx, cmd, tty)
	if err != nil {
		return nil, fmt.Errorf("local: start in %s: %w", id, err)
	}
	return p, nil
}

// Listen listens on a loopback address inside the jail (its own network
// namespace) and hands each connection to the host.
func (b *Backend) Listen(ctx context.Context, id, addr string) (net.Listener, error) {
	j := b.live(id)
	if j == nil {
		return nil, fmt.Errorf("local: listen in %s: %w: sandbox is not running", id, sandbox.ErrUnavailable)
	}
	l, err := j.client.Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("local: listen in %s: %w", id, err)
	}
	return l, nil
}

// Reconcile finds nothing: a jail is a child of this process and ends with
// it, so no earlier process leaves one behind.
func (b *Backend) Reconcile(context.Context, func(string) sandbox.Verdict) (adopted, removed []string, err error) {
	return nil, nil, nil
}
