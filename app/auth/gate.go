package auth

import (
	"context"
	"fmt"
	"sync/atomic"

	"threadbox/domain/fault"
)

// passwordGate bounds the bcrypt work of the server: at most slots
// password checks or hashes run at once (each takes a CPU for tens of
// milliseconds), at most queue more wait for a slot, and any beyond are
// refused at once with 503. Without it a flood of logins from many
// addresses, each within its throttle, would queue bcrypt runs without
// bound and starve every other request of CPU.
type passwordGate struct {
	slots   chan struct{}
	queue   int64
	waiting atomic.Int64
}

func newPasswordGate(slots, queue int) *passwordGate {
	return &passwordGate{slots: make(chan struct{}, slots), queue: int64(queue)}
}

var errPasswordBusy = fault.New(fault.Unavailable, "too many sign-ins at once: try again in a moment")

// run runs fn in a slot: at once when one is free, after waiting when
// fewer than queue others wait, or not at all (errPasswordBusy).
func (g *passwordGate) run(ctx context.Context, fn func()) error {
	select {
	case g.slots <- struct{}{}:
	default:
		if g.waiting.Add(1) > g.queue {
			g.waiting.Add(-1)
			return errPasswordBusy
		}
		select {
		case g.slots <- struct{}{}:
			g.waiting.Add(-1)
		case <-ctx.Done():
			g.waiting.Add(-1)
			return fmt.Errorf("auth: waiting for a password check: %w", ctx.Err())
		}
	}
	defer func() { <-g.slots }()
	fn()
	return nil
}
