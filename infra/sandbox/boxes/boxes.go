// Package boxes keeps a sandbox backend's running sandboxes by container id:
// a lock per id that orders boot and stop, the lookup that drops the ones
// that ended, and the boot of a missing one over its host folders.
package boxes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
)

// Set holds the running boxes of type B of one backend. The zero value is
// not usable; New makes one.
type Set[B any] struct {
	ended func(B) bool

	mu    sync.Mutex
	boxes map[string]B           // running, by container id
	known map[string]bool        // ids booted at least once
	locks map[string]*sync.Mutex // per id: boot, stop
}

// New returns an empty set. ended reports whether a box has ended (its
// sandbox died or its agent gave up), releasing what it holds if so; it is
// called with the set's lock held and must not block.
func New[B any](ended func(B) bool) *Set[B] {
	return &Set[B]{ended: ended, boxes: map[string]B{}, known: map[string]bool{}, locks: map[string]*sync.Mutex{}}
}

// Lock takes id's lock and returns its release.
func (s *Set[B]) Lock(id string) (unlock func()) {
	s.mu.Lock()
	m, ok := s.locks[id]
	if !ok {
		m = &sync.Mutex{}
		s.locks[id] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Live returns id's running box; one that ended is dropped.
func (s *Set[B]) Live(id string) (B, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.boxes[id]
	if ok && s.ended(b) {
		delete(s.boxes, id)
		var zero B
		return zero, false
	}
	return b, ok
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

// Forget drops what the set remembers of id besides a running box.
func (s *Set[B]) Forget(id string) {
	s.mu.Lock()
	delete(s.locks, id)
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
