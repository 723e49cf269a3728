// Package boxes is what the sandbox backends that speak to an in-sandbox
// agent share: their running sandboxes by container id (a lock per id that
// orders boot and stop, the lookup that drops the ones that ended, the boot
// of a missing one over its host folders, stop, remove and the verdict of
// a reconcile), the calls that go through a running sandbox's agent
// (ops.go), the host process of a sandbox this process started (proc.go),
// the checks and handshake of a boot (boot.go), the log of a sandbox's
// stderr (logtail.go), the warm pool and the answers of a backend without
// one (pool.go), the answers of a backend whose sandboxes keep files only
// across a stop and the checkpoint calls of one that saves them
// (checkpoint.go), and the settings every backend takes (settings.go).
package boxes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
)

// Set holds the running boxes of type B of one backend. The zero value is
// not usable; New makes one.
type Set[B Box] struct {
	name string // the backend's, the prefix of its errors
	log  *slog.Logger

	mu    sync.Mutex
	boxes map[string]B    // running, by container id
	known map[string]bool // ids booted at least once
	locks sandbox.Locks   // per id: boot, stop
}

// New returns an empty set of the backend name, which logs the stops of
// its sandboxes to log.
func New[B Box](name string, log *slog.Logger) *Set[B] {
	return &Set[B]{name: name, log: log, boxes: map[string]B{}, known: map[string]bool{}}
}

// Lock takes id's lock and returns its release.
func (s *Set[B]) Lock(id string) (unlock func()) { return s.locks.Lock(id) }

// ended reports whether b has ended: its sandbox went, or its agent
// connection gave up (keepalive: the sandbox is hung), which kills it.
func ended[B Box](b B) bool {
	select {
	case <-b.Done():
		return true
	case <-b.Agent().Done():
		go b.Kill()
		return true
	default:
		return false
	}
}

// Live returns id's running box; one that ended is dropped.
func (s *Set[B]) Live(id string) (B, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.boxes[id]
	if ok && ended(b) {
		delete(s.boxes, id)
		var zero B
		return zero, false
	}
	return b, ok
}

// Get returns id's running box, or the zero B (nil for a pointer).
func (s *Set[B]) Get(id string) B {
	b, _ := s.Live(id)
	return b
}

// Put records b as id's running box.
func (s *Set[B]) Put(id string, b B) {
	s.mu.Lock()
	s.boxes[id] = b
	s.known[id] = true
	s.mu.Unlock()
}

// Take removes id's box from the set and returns it, ended or not.
func (s *Set[B]) Take(id string) (B, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.boxes[id]
	delete(s.boxes, id)
	return b, ok
}

// TakeAll empties the set and returns what it held.
func (s *Set[B]) TakeAll() []B {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]B, 0, len(s.boxes))
	for _, b := range s.boxes {
		all = append(all, b)
	}
	s.boxes = map[string]B{}
	return all
}

// IDs returns the ids of the boxes held whose box satisfies keep (nil
// keeps all); keep is called with the set's lock held.
func (s *Set[B]) IDs(keep func(B) bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, b := range s.boxes {
		if keep == nil || keep(b) {
			ids = append(ids, id)
		}
	}
	return ids
}

// Known reports whether a box of id was put in the set since it was last
// forgotten.
func (s *Set[B]) Known(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[id]
}

// Stop takes id's box out of the set and kills it, then waits until its
// sandbox has gone or ctx is done; the caller holds id's lock. A stop of a
// box the set held is logged.
func (s *Set[B]) Stop(ctx context.Context, id string) error {
	b, ok := s.Take(id)
	if !ok {
		return nil
	}
	b.Kill()
	select {
	case <-b.Done():
	case <-ctx.Done():
		return fmt.Errorf("%s: stop %s: %w", s.name, id, ctx.Err())
	}
	s.log.Info("sandbox stopped", "id", id)
	return nil
}

// StopAll stops every box the set holds with stop, the backend's Stop,
// and joins their errors: a backend's Close.
func (s *Set[B]) StopAll(stop func(ctx context.Context, id string) error) error {
	var errs []error
	for _, id := range s.IDs(nil) {
		errs = append(errs, stop(context.Background(), id))
	}
	return errors.Join(errs...)
}

// Remove stops id's sandbox with stop, the backend's Stop, then forgets
// it: a backend's Remove. Host folders are the caller's.
func (s *Set[B]) Remove(ctx context.Context, id string, stop func(ctx context.Context, id string) error) error {
	if err := stop(ctx, id); err != nil {
		return err
	}
	s.Forget(id)
	return nil
}

// Forget drops what the set remembers of id besides a running box.
func (s *Set[B]) Forget(id string) {
	s.mu.Lock()
	delete(s.known, id)
	s.mu.Unlock()
}

// Ensure boots id's box with boot unless it is running, under id's lock.
// With dirs, the host folders are prepared first and, when spec names no
// mounts, mounted. A failure wraps sandbox.ErrUnavailable.
func (s *Set[B]) Ensure(ctx context.Context, spec sandbox.Spec, dirs *hostdirs.Layout, boot func(context.Context, sandbox.Spec) (B, error)) error {
	if spec.ID == "" {
		return errors.New("ensure: empty container id")
	}
	defer s.Lock(spec.ID)()
	if _, ok := s.Live(spec.ID); ok {
		return nil
	}
	if dirs != nil {
		d, err := dirs.Prepare(ctx, spec.ID)
		if err != nil {
			return fmt.Errorf("ensure %s: %w: %w", spec.ID, sandbox.ErrUnavailable, err)
		}
		if len(spec.Mounts) == 0 {
			spec.Mounts = d.Mounts()
		}
	}
	b, err := boot(ctx, spec)
	if err != nil {
		return fmt.Errorf("ensure %s: %w: %w", spec.ID, sandbox.ErrUnavailable, err)
	}
	s.Put(spec.ID, b)
	return nil
}

// Verdict says what a backend's Reconcile does with a sandbox it found
// serving id: Leave when the set holds id's box (this process serves it),
// Drop when id is unknown, else what decide says.
func (s *Set[B]) Verdict(id string, decide func(id string) sandbox.Verdict) sandbox.Verdict {
	if id == "" {
		return sandbox.Drop
	}
	if _, held := s.Live(id); held {
		return sandbox.Leave
	}
	return decide(id)
}
