package files

import (
	"context"
	"sync"
	"time"
)

// DefaultIdempotencyTTL is how long MemoryIdempotency remembers an upload.
const DefaultIdempotencyTTL = 24 * time.Hour

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

// Lookup returns the entry under key unless it has expired.
func (m *MemoryIdempotency) Lookup(_ context.Context, key string) (Saved, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.entries[key]
	if !ok {
		return Saved{}, false, nil
	}
	if m.now().Sub(s.At) >= m.ttl {
		delete(m.entries, key)
		return Saved{}, false, nil
	}
	return s, true, nil
}

// Save stores s under key and drops expired entries.
func (m *MemoryIdempotency) Save(_ context.Context, key string, s Saved) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for k, e := range m.entries {
		if now.Sub(e.At) >= m.ttl {
			delete(m.entries, k)
		}
	}
	if s.At.IsZero() {
		s.At = now
	}
	m.entries[key] = s
	return nil
}
