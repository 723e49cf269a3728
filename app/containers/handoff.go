package containers

import (
	"context"
	"strings"
	"time"
)

// Handoff asks the server holding a lease to give it back (infra/store.Leases:
// a PostgreSQL notification every server listens for). Every server of a
// scaled-out deployment reaches every sandbox's files (a shared DATA_DIR)
// and the same Docker daemon, so a sandbox another live server holds moves
// to the server that needs it: the holder stops it (its files stay) once no
// command runs in it, and the asker boots it again over the same files.
type Handoff interface {
	// WantLease tells every server that the named lease is wanted.
	WantLease(ctx context.Context, name string) error
}

// DefaultHandoffWait is how long a command waits for another server to
// hand a sandbox over before answering that it is held elsewhere.
const DefaultHandoffWait = 15 * time.Second

// takeOver asks the holder of the container's sandbox lease to hand it
// over and waits until this process has taken the lease, or the wait ends
// (false). A caller whose context ends first gets the end of its context:
// the holder did not refuse it. The caller holds the container's lock.
func (s *Service) takeOver(ctx context.Context, id string) (bool, error) {
	if s.handoff == nil {
		return false, nil
	}
	wait, cancel := context.WithTimeout(ctx, s.handoffWait)
	defer cancel()
	asked := time.Time{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// Asked again every few seconds: a holder busy with a command
		// when first asked hands over once the command ends.
		if time.Since(asked) > 3*time.Second {
			if err := s.handoff.WantLease(wait, sandboxLease(id)); err != nil {
				if wait.Err() != nil {
					return false, ctx.Err()
				}
				return false, err
			}
			asked = time.Now()
		}
		select {
		case <-wait.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
		ok, err := s.leases.Acquire(wait, sandboxLease(id))
		if err != nil || ok {
			if wait.Err() != nil {
				return false, ctx.Err()
			}
			return ok, err
		}
	}
}

// HandBack is called with the name of a lease another server wants: when
// it is the lease of a sandbox this process holds and no command runs in
// it, the sandbox is stopped (its files stay; checkpointed first where its
// backend can, and then the asker restores it) and the lease given back,
// so the asker boots it over the same files. A busy sandbox is kept; the
// asker asks again.
func (s *Service) HandBack(name string) {
	id, ok := strings.CutPrefix(name, "sandbox:")
	if !ok {
		return
	}
	if l, _ := s.held(id); l == nil {
		return
	}
	go func() {
		defer s.lock(id)()
		if l, busy := s.held(id); l == nil || busy {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.suspendLocked(ctx, id); err != nil {
			s.log.Warn("sandbox not handed over", "container", id, "cause", err.Error())
			return
		}
		s.log.Info("sandbox handed over to another server", "container", id)
	}()
}
