package dockerprobe

import (
	"context"
	"fmt"
	"net"

	"threadbox/domain/sandbox"
)

// Start starts a long-lived command through the wrapped backend when it
// offers sessions (sandbox.Sessions).
func (b *Backend) Start(ctx context.Context, id string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	s, ok := b.Backend.(sandbox.Sessions)
	if !ok {
		return nil, fmt.Errorf("dockerprobe: %w: the backend cannot run sessions", sandbox.ErrUnavailable)
	}
	return s.Start(ctx, id, cmd, tty)
}

// Listen listens inside the sandbox through the wrapped backend when it
// forwards connections (sandbox.Forwarder).
func (b *Backend) Listen(ctx context.Context, id, addr string) (net.Listener, error) {
	f, ok := b.Backend.(sandbox.Forwarder)
	if !ok {
		return nil, fmt.Errorf("dockerprobe: %w: the backend cannot forward connections", sandbox.ErrUnavailable)
	}
	return f.Listen(ctx, id, addr)
}
