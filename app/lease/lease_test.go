package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// memStore keeps leases in memory; while full is set, writes fail as they
// do when the database's disk is full.
type memStore struct {
	mu     sync.Mutex
	full   bool
	leases map[string]struct {
		holder string
		until  time.Time
	}
}

var errFull = errors.New("database or disk is full")

func (m *memStore) AcquireLease(_ context.Context, name, holder string, until, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return false, errFull
	}
	if l, ok := m.leases[name]; ok && l.holder != holder && l.until.After(now) {
		return false, nil
	}
	m.leases[name] = struct {
		holder string
		until  time.Time
	}{holder, until}
	return true, nil
}

func (m *memStore) RenewLeases(_ context.Context, holder string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return errFull
	}
	for n, l := range m.leases {
		if l.holder == holder {
			l.until = until
			m.leases[n] = l
		}
	}
	return nil
}

func (m *memStore) ReleaseLease(_ context.Context, name, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return errFull
	}
	if l, ok := m.leases[name]; ok && l.holder == holder {
		delete(m.leases, name)
	}
	return nil
}

func (m *memStore) ReleaseLeases(context.Context, string) error { return nil }

func (m *memStore) LeaseHolder(_ context.Context, name string, now time.Time) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.leases[name]; ok && l.until.After(now) {
		return l.holder, nil
	}
	return "", nil
}

func (m *memStore) setFull(v bool) {
	m.mu.Lock()
	m.full = v
	m.mu.Unlock()
}

// TestReleaseFailedIsRetried: a lease whose release failed (the database
// could not write for a while) is given back at the next renewal once the
// database writes again, instead of being renewed for as long as the
// process lives — before, a chat turn that ended while the disk was full
// left its thread's turn lease held for good: the thread said a turn was
// running and refused every new one. A lease taken again meanwhile is
// not given back.
func TestReleaseFailedIsRetried(t *testing.T) {
	ctx := context.Background()
	st := &memStore{leases: map[string]struct {
		holder string
		until  time.Time
	}{}}
	k := New(st, "test", time.Minute)
	for _, name := range []string{"turn:a", "turn:b"} {
		if ok, err := k.Acquire(ctx, name); !ok || err != nil {
			t.Fatalf("acquire %s: %v %v", name, ok, err)
		}
	}
	st.setFull(true)
	for _, name := range []string{"turn:a", "turn:b"} {
		if err := k.Release(ctx, name); err == nil {
			t.Fatalf("release %s with the database full: no error", name)
		}
	}
	if err := k.Renew(ctx); err == nil {
		t.Fatal("renew with the database full: no error")
	}
	st.setFull(false)
	if ok, err := k.Acquire(ctx, "turn:b"); !ok || err != nil { // a new turn in b
		t.Fatalf("acquire turn:b again: %v %v", ok, err)
	}
	if err := k.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if mine, _, _ := k.Holds(ctx, "turn:a"); mine {
		t.Error("turn:a is still held after a renewal with the database writing again")
	}
	if mine, _, _ := k.Holds(ctx, "turn:b"); !mine {
		t.Error("turn:b, taken again after its failed release, was given back")
	}
}
