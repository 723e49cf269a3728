package auth

import (
	"context"
	"sync"
	"testing"
	"time"

	"threadbox/domain/fault"
)

// fakeAttempts is an in-memory LoginAttempts with the store's semantics.
type fakeAttempts struct {
	mu       sync.Mutex
	counters map[string]fakeCounter
	known    map[string]time.Time
}

type fakeCounter struct {
	n     int
	start time.Time
}

func (f *fakeAttempts) TakeLoginAttempt(_ context.Context, name string, limit int, now, windowStart time.Time) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counters == nil {
		f.counters = map[string]fakeCounter{}
	}
	c, ok := f.counters[name]
	switch {
	case !ok || !c.start.After(windowStart):
		f.counters[name] = fakeCounter{1, now}
	case c.n < limit:
		f.counters[name] = fakeCounter{c.n + 1, c.start}
	default:
		return false, nil
	}
	return true, nil
}

func (f *fakeAttempts) ReturnLoginAttempt(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.counters[name]; ok && c.n > 0 {
		f.counters[name] = fakeCounter{c.n - 1, c.start}
	}
	return nil
}

func (f *fakeAttempts) ClearLoginAttempts(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.counters, name)
	return nil
}

func (f *fakeAttempts) PruneLoginAttempts(context.Context, time.Time, time.Time) error { return nil }

func (f *fakeAttempts) KnownLoginAddress(_ context.Context, email, addr string, since time.Time) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.known[email+"|"+addr]
	return ok && t.After(since), nil
}

func (f *fakeAttempts) RememberLoginAddress(_ context.Context, email, addr string, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.known == nil {
		f.known = map[string]time.Time{}
	}
	f.known[email+"|"+addr] = now
	return nil
}

func TestLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	// Each step is one attempt: who, when, whether it succeeds (when let
	// through), and whether it must be refused.
	type step struct {
		email, addr string
		at          time.Duration
		success     bool
		refused     bool
	}
	repeat := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a spent email counter leaves each new address a few attempts", cat(
			repeat(3, step{email: "a@x", addr: "1.1.1.1"}),
			repeat(2, step{email: "a@x", addr: "2.2.2.2"}),
			repeat(3, step{email: "a@x", addr: "3.3.3.3"}),
			[]step{{email: "a@x", addr: "3.3.3.3", refused: true}},
			// Attempts before the email was spent do not count here.
			repeat(3, step{email: "a@x", addr: "2.2.2.2"}),
			[]step{{email: "a@x", addr: "2.2.2.2", refused: true}},
		)},
		{"the owner's known address gets through a spent email counter", cat(
			[]step{{email: "a@x", addr: "9.9.9.9", success: true}},
			repeat(5, step{email: "a@x", addr: "6.6.6.6"}),
			[]step{{email: "a@x", addr: "6.6.6.6", refused: true}},
			repeat(5, step{email: "a@x", addr: "9.9.9.9"}),
			[]step{{email: "a@x", addr: "9.9.9.9", success: true, refused: true}},
		)},
		{"the owner from a new address gets through a spent email counter", cat(
			repeat(5, step{email: "a@x", addr: "6.6.6.6"}),
			[]step{{email: "a@x", addr: "7.7.7.7"}},
			[]step{{email: "a@x", addr: "7.7.7.7", success: true}},
			// The success cleared the email's count: no longer under attack.
			repeat(5, step{email: "a@x", addr: "8.8.8.8"}),
			[]step{{email: "a@x", addr: "5.5.5.5"}},
		)},
		{"the known address is bounded by its own counter", cat(
			[]step{{email: "a@x", addr: "9.9.9.9", success: true}},
			repeat(5, step{email: "a@x", addr: "6.6.6.6"}),
			repeat(5, step{email: "a@x", addr: "9.9.9.9"}),
			[]step{{email: "a@x", addr: "9.9.9.9", success: true, refused: true}},
		)},
		{"one address spraying many emails stops at its limit", cat(
			[]step{{email: "a@x", addr: "1.1.1.1"}, {email: "b@x", addr: "1.1.1.1"}, {email: "c@x", addr: "1.1.1.1"},
				{email: "d@x", addr: "1.1.1.1"}, {email: "e@x", addr: "1.1.1.1"}, {email: "f@x", addr: "1.1.1.1"},
				{email: "g@x", addr: "1.1.1.1"}, {email: "h@x", addr: "1.1.1.1", refused: true}},
			[]step{{email: "h@x", addr: "1.1.1.2"}},
		)},
		{"a window that passed starts over", cat(
			repeat(5, step{email: "a@x", addr: "1.1.1.1"}),
			repeat(3, step{email: "a@x", addr: "2.2.2.2"}),
			[]step{{email: "a@x", addr: "2.2.2.2", refused: true}},
			[]step{{email: "a@x", addr: "1.1.1.1", refused: true}},
			repeat(5, step{email: "a@x", addr: "2.2.2.2", at: 16 * time.Minute}),
			[]step{{email: "a@x", addr: "1.1.1.1", at: 16 * time.Minute}},
		)},
		{"a success clears the email's count", cat(
			repeat(4, step{email: "a@x", addr: "1.1.1.1"}),
			[]step{{email: "a@x", addr: "1.1.1.1", success: true}},
			repeat(5, step{email: "a@x", addr: "2.2.2.2"}),
		)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &limiter{store: &fakeAttempts{}, email: 5, addr: 7, newAddr: newAddressLimit(5), window: 15 * time.Minute, knownTTL: 24 * time.Hour}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				err := l.take(ctx, s.email, s.addr, now)
				if got := err != nil; got != s.refused {
					t.Fatalf("step %d (%s from %s): refused=%v (%v), want %v", i, s.email, s.addr, got, err, s.refused)
				}
				if err != nil && !fault.Is(err, fault.RateLimited) {
					t.Fatalf("step %d: refusal is %v, want rate_limited", i, err)
				}
				if err == nil && s.success {
					if err := l.succeeded(ctx, s.email, s.addr, now); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"", ""},
	} {
		if got := clientKey(tc.in); got != tc.want {
			t.Errorf("clientKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
