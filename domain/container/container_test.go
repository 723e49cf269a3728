package container

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestClientIDMatchesPattern: the hand-written check accepts exactly what
// the documented pattern does.
func TestClientIDMatchesPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	const alphabet = "aZ09_.-/ \x00é"
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(70))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if id := string(b); validClientID(id) != pattern.MatchString(id) {
			t.Fatalf("%q: check %v, pattern %v", id, validClientID(id), pattern.MatchString(id))
		}
	}
}

func TestClientIDs(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"my-container", true}, {"a", true}, {"A.b_c-1", true}, {"", false}, {"-x", false},
		{"../etc", false}, {"a/b", false}, {"a b", false}, {"a--b", false}, {string(make([]byte, 65)), false},
		{"x\x00", false}, {"é", false}, {strings.Repeat("a", 64), true}, {strings.Repeat("a", 65), false},
		{".x", false}, {"_x", false}, {"x.", true}, {"0", true}, {"a\n", false},
	} {
		if err := ValidateClientID(tc.id); (err == nil) != tc.ok {
			t.Errorf("%q: ok=%v err=%v", tc.id, tc.ok, err)
		}
	}
	now := time.Now()
	a, _ := NewForUser("org", "usr_a", "box", now)
	b, _ := NewForUser("org", "usr_b", "box", now)
	if a.ID() == b.ID() || a.ClientID() != "box" || !a.AccessibleBy("org", "usr_a") || a.AccessibleBy("org", "usr_b") || a.AccessibleBy("other", "usr_a") {
		t.Fatalf("namespacing: %s %s", a.ID(), b.ID())
	}
	th, _ := NewForThread("org", "usr_a", "thr_1", now)
	if th.ID() != "thr_1" || th.ThreadID() != "thr_1" {
		t.Fatalf("thread container: %+v", th)
	}
}

func TestExpiry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, _ := NewForUser("org", "usr", "x", t0)
	th, _ := NewForThread("org", "usr", "thr_1", t0)
	cases := []struct {
		name    string
		thread  bool
		used    time.Duration // after creation
		idle    time.Duration
		maxAge  time.Duration
		wantExp time.Duration // after creation
		checkAt time.Duration
		expired bool
	}{
		{"rolls with use", false, 10 * time.Minute, 5 * time.Minute, time.Hour, 15 * time.Minute, 20 * time.Minute, false},
		{"capped by max age", false, 58 * time.Minute, 5 * time.Minute, time.Hour, time.Hour, 59 * time.Minute, false},
		{"past max age", false, 0, 5 * time.Minute, time.Hour, 5 * time.Minute, time.Hour, true},
		{"no max age", false, 0, 5 * time.Minute, 0, 5 * time.Minute, 1000 * time.Hour, false},
		{"a thread's lives as long as the thread", true, 0, 5 * time.Minute, time.Hour, 5 * time.Minute, 1000 * time.Hour, false},
		{"a thread's rolls past max age", true, 58 * time.Minute, 5 * time.Minute, time.Hour, 63 * time.Minute, 2 * time.Hour, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := c
			if tc.thread {
				u = th
			}
			u = u.Touch(t0.Add(tc.used))
			if got := u.ExpiresAt(tc.idle, tc.maxAge); !got.Equal(t0.Add(tc.wantExp)) {
				t.Errorf("expires_at %v, want %v", got, t0.Add(tc.wantExp))
			}
			if got := u.Expired(t0.Add(tc.checkAt), tc.maxAge); got != tc.expired {
				t.Errorf("expired=%v", got)
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in       string
		thread   bool
		clientID string
	}{
		{"thr_abc", true, ""}, {"my-box", false, "my-box"}, {"", false, ""}, {"thr", false, "thr"}, {"xthr_a", false, "xthr_a"},
	} {
		r := ParseRef(tc.in)
		if id, ok := r.Thread(); ok != tc.thread || (ok && id != tc.in) || r.ClientID() != tc.clientID || r.String() != tc.in {
			t.Errorf("%q: thread %v %q, client id %q", tc.in, ok, id, r.ClientID())
		}
	}
}
