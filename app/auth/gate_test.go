package auth

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// gateStore is the part of Store a password check reads: one org and its
// users by email; the throttle's counters are fakeAttempts.
type gateStore struct {
	Store
	att   *fakeAttempts
	users map[string]user.User
}

func (s gateStore) TakeLoginAttempt(ctx context.Context, name string, limit int, now, start time.Time) (bool, error) {
	return s.att.TakeLoginAttempt(ctx, name, limit, now, start)
}
func (s gateStore) ReturnLoginAttempt(ctx context.Context, name string) error {
	return s.att.ReturnLoginAttempt(ctx, name)
}
func (s gateStore) ClearLoginAttempts(ctx context.Context, name string) error {
	return s.att.ClearLoginAttempts(ctx, name)
}
func (s gateStore) PruneLoginAttempts(ctx context.Context, start, seen time.Time) error {
	return s.att.PruneLoginAttempts(ctx, start, seen)
}
func (s gateStore) KnownLoginAddress(ctx context.Context, email, addr string, since time.Time) (bool, error) {
	return s.att.KnownLoginAddress(ctx, email, addr, since)
}
func (s gateStore) RememberLoginAddress(ctx context.Context, email, addr string, now time.Time) error {
	return s.att.RememberLoginAddress(ctx, email, addr, now)
}

func (s gateStore) UserByEmail(_ context.Context, email string) (user.User, error) {
	if u, ok := s.users[email]; ok {
		return u, nil
	}
	return user.User{}, fault.New(fault.NotFound, "user not found")
}

func (s gateStore) Org(context.Context, string) (org.Org, error) {
	return org.Restore("org_1", "acme", false, org.DefaultPolicy(), time.Now()), nil
}

// TestPasswordChecksAreBounded: with two checks at once and one waiting,
// a fourth login at that moment is refused with 503 (unavailable) without
// running bcrypt, and the three others finish once the checks end.
func TestPasswordChecksAreBounded(t *testing.T) {
	const checks, queue = 2, 1
	u := user.Restore("usr_1", "org_1", "owner@acme.test", user.Admin, false, "stored-hash", time.Now())
	st := gateStore{att: &fakeAttempts{}, users: map[string]user.User{u.Email(): u}}
	svc := New(st, st, nil, Config{PasswordChecks: checks, PasswordQueue: queue})
	var running, most atomic.Int64
	release := make(chan struct{})
	svc.compare = func(hash, password []byte) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		return errors.New("mismatch")
	}
	login := func(i int) error {
		_, err := svc.Login(context.Background(), "owner@acme.test", "a wrong guess", fmt.Sprintf("192.0.2.%d", i))
		return err
	}

	results := make(chan error, checks+queue)
	var wg sync.WaitGroup
	for i := range checks + queue {
		wg.Add(1)
		go func() { defer wg.Done(); results <- login(i) }()
	}
	// Wait until the checks are running and the rest wait, or until more
	// run than the bound (then the fourth below is not refused either).
	for (running.Load() < checks || svc.gate.waiting.Load() < queue) && running.Load() <= checks {
		runtime.Gosched()
	}
	fourth := make(chan error, 1)
	go func() { fourth <- login(99) }()
	stop := make(chan struct{})
	defer close(stop)
	answered := false
	select {
	case err := <-fourth:
		answered = true
		if !fault.Is(err, fault.Unavailable) {
			t.Errorf("the fourth login at once: %v, want unavailable", err)
		}
	case <-waitFor(stop, func() bool { return running.Load() > checks }):
		t.Errorf("%d password checks ran at once, want at most %d", running.Load(), checks)
	}
	close(release)
	wg.Wait()
	if !answered {
		<-fourth
	}
	close(results)
	for err := range results {
		if !fault.Is(err, fault.Unauthenticated) {
			t.Errorf("a login that waited its turn: %v, want invalid email or password", err)
		}
	}
	if m := most.Load(); m > checks {
		t.Errorf("%d password checks ran at once, want at most %d", m, checks)
	}
}

// waitFor returns a channel closed once cond holds; it stops looking when
// stop is closed.
func waitFor(stop <-chan struct{}, cond func() bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for !cond() {
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
		close(ch)
	}()
	return ch
}
