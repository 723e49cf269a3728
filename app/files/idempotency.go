package files

import (
	"context"
	"sync"
	"time"
)

// DefaultIdempotencyTTL is how long a finished upload is remembered.
const DefaultIdempotencyTTL = 24 * time.Hour

// ClaimTTL is how long a claimed Idempotency-Key stays held without its
// upload finishing: past it (a server that died mid-upload) a retry may
// claim the key again.
const ClaimTTL = 10 * time.Minute

// MemoryIdempotency is an in-process Idempotency with a time to live. It
// suits a single server; several servers need a shared store.
type MemoryIdempotency struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]Saved
}

// NewMemoryIdempotency returns an empty map whose entries live ttl (zero
// means DefaultIdempotencyTTL); now nil means time.Now.
func NewMemoryIdempotency(ttl time.Duration, now func() time.Time) *MemoryIdempotency {
	if ttl <= 0 {
		ttl = DefaultIdempotencyTTL
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryIdempotency{ttl: ttl, now: now, entries: map[string]Saved{}}
}

// lapsed reports whether e is no longer remembered at now.
func lapsed(e Saved, now time.Time, ttl time.Duration) bool {
	if e.Pending {
		ttl = min(ttl, ClaimTTL)
	}
	return now.Sub(e.At) >= ttl
}

// Claim holds key for the caller unless a live entry holds it.
func (m *MemoryIdempotency) Claim(_ context.Context, key, fingerprint string) (Saved, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.entries[key]; ok && !lapsed(e, now, m.ttl) {
		return e, false, nil
	}
	m.entries[key] = Saved{Fingerprint: fingerprint, At: now, Pending: true}
	return Saved{}, true, nil
}

// Save stores s under key and drops lapsed entries.
func (m *MemoryIdempotency) Save(_ context.Context, key string, s Saved) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for k, e := range m.entries {
		if lapsed(e, now, m.ttl) {
			delete(m.entries, k)
		}
	}
	if s.At.IsZero() {
		s.At = now
	}
	s.Pending = false
	m.entries[key] = s
	return nil
}

// Release forgets key's claim; a finished entry stays.
func (m *MemoryIdempotency) Release(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[key]; ok && e.Pending {
		delete(m.entries, key)
	}
	return nil
}
