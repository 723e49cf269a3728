package sandbox

import (
	"context"
	"sync"
	"sync/atomic"
)

// Locks orders work on sandboxes one id at a time within a process: the
// owner's decisions about a container, the preparation and removal of its
// folders, a backend's boots and stops. An id's entry lives only while its
// lock is held or awaited, so the map holds the ids in use. The zero Locks
// is ready.
type Locks struct {
	mu   sync.Mutex
	held map[string]*idLock // held or awaited, by id
}

// idLock is one id's lock and how many hold or await it. The lock is held
// while tok holds its one token, so a waiter can give up on a context.
type idLock struct {
	tok   chan struct{}
	users int
}

// Lock holds id's lock until the returned func is called, however long it
// waits for it: for work that must finish (the sweep, a shutdown).
func (k *Locks) Lock(id string) (unlock func()) {
	unlock, _ = k.LockContext(context.Background(), id)
	return unlock
}

// LockContext holds id's lock until the returned func is called, or gives
// up waiting for it once ctx ends, with ctx's error: for work done for a
// request, which must not wait behind a long boot after the request is
// gone. A lock free at the call is taken whatever ctx says.
func (k *Locks) LockContext(ctx context.Context, id string) (unlock func(), err error) {
	k.mu.Lock()
	if k.held == nil {
		k.held = map[string]*idLock{}
	}
	m, ok := k.held[id]
	if !ok {
		m = &idLock{tok: make(chan struct{}, 1)}
		k.held[id] = m
	}
	m.users++
	k.mu.Unlock()
	select {
	case m.tok <- struct{}{}:
	default:
		select {
		case m.tok <- struct{}{}:
		case <-ctx.Done():
			k.leave(id, m)
			return nil, ctx.Err()
		}
	}
	var released atomic.Bool
	return func() {
		// A second call would take the token of the lock's next holder.
		if released.Swap(true) {
			panic("sandbox: unlock of " + id + "'s lock, released before")
		}
		<-m.tok
		k.leave(id, m)
	}, nil
}

// leave counts out a holder or waiter of id's lock, dropping its entry
// with the last.
func (k *Locks) leave(id string, m *idLock) {
	k.mu.Lock()
	if m.users--; m.users == 0 {
		delete(k.held, id)
	}
	k.mu.Unlock()
}

// InUse counts the ids whose lock is held or awaited.
func (k *Locks) InUse() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}
