package auth

import (
	"fmt"
	"sync"
	"time"

	"threadbox/domain/fault"
)

// Login throttling: after freeLogins failed logins in a row for one email,
// each further attempt must wait, twice as long after every failure, up to
// maxLoginWait. A success clears the count. The wait bounds online password
// guessing (and the bcrypt CPU it costs) without locking the owner out for
// long.
const (
	freeLogins   = 5
	firstWait    = time.Second
	maxLoginWait = 5 * time.Minute
	// forgetAfter drops the count of an email left alone this long.
	forgetAfter = 15 * time.Minute
)

// throttle counts failed logins per email, in memory (one server).
type throttle struct {
	mu    sync.Mutex
	fails map[string]failures
}

type failures struct {
	n    int
	last time.Time
}

// wait returns how long email must still wait before another attempt.
func (t *throttle) wait(email string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.fails[email]
	if !ok || f.n < freeLogins {
		return 0
	}
	d := firstWait << min(f.n-freeLogins, 20)
	return max(min(d, maxLoginWait)-now.Sub(f.last), 0)
}

// failed records a failed login of email.
func (t *throttle) failed(email string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fails == nil {
		t.fails = map[string]failures{}
	}
	if len(t.fails) > 10000 { // many emails tried: drop the stale ones
		for k, f := range t.fails {
			if now.Sub(f.last) > forgetAfter {
				delete(t.fails, k)
			}
		}
	}
	f := t.fails[email]
	if now.Sub(f.last) > forgetAfter {
		f.n = 0
	}
	t.fails[email] = failures{n: f.n + 1, last: now}
}

// succeeded clears the count of email.
func (t *throttle) succeeded(email string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.fails, email)
}

// refusal is the answer to an attempt that must wait d.
func refusal(d time.Duration) error {
	return fault.New(fault.RateLimited, fmt.Sprintf("too many failed logins for this email: try again in %d s", int(d.Seconds()+0.999)))
}
