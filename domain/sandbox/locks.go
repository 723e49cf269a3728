package sandbox

import "sync"

// Locks orders work on sandboxes one id at a time within a process: the
// owner's decisions about a container, the preparation and removal of its
// folders, a backend's boots and stops. An id's entry lives only while its
// lock is held or awaited, so the map holds the ids in use. The zero Locks
// is ready.
type Locks struct {
	mu   sync.Mutex
	held map[string]*idLock // held or awaited, by id
}

// idLock is one id's lock and how many hold or await it.
type idLock struct {
	mu    sync.Mutex
	users int
}

// Lock holds id's lock until the returned func is called.
func (k *Locks) Lock(id string) (unlock func()) {
	k.mu.Lock()
	if k.held == nil {
		k.held = map[string]*idLock{}
	}
	m, ok := k.held[id]
	if !ok {
		m = &idLock{}
		k.held[id] = m
	}
	m.users++
	k.mu.Unlock()
	m.mu.Lock()
	return func() {
		m.mu.Unlock()
		k.mu.Lock()
		if m.users--; m.users == 0 {
			delete(k.held, id)
		}
		k.mu.Unlock()
	}
}

// InUse counts the ids whose lock is held or awaited.
func (k *Locks) InUse() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}
