package auth

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"threadbox/domain/fault"
)

// Login throttling. Every attempt takes one unit from three counters
// before its password is checked, each in one atomic statement of the
// database (so concurrent bursts and several replicas share one count):
//
//   - the client address (an IPv6 address counts as its /64), AddrLimit
//     attempts per window: bounds password spraying over many emails;
//   - the pair of email and address, EmailLimit attempts per window:
//     bounds guessing one account's password from one address;
//   - the email, EmailLimit attempts per window: tells when one account's
//     password is being guessed from many addresses.
//
// An attempt whose address or pair counter is spent is refused. A spent
// email counter refuses nobody outright: it marks the account as under
// attack, and while it is, an address that never logged into the email
// successfully (within KnownAddressTTL) gets only newAddressLimit attempts
// per window at it (a fourth counter, of the pair, taken only then). So an
// attacker who keeps an account's email counter spent locks its owner out
// of no address: the owner's known addresses keep their pair counter, and
// from a new address (a phone, a trip) the owner still has a few tries.
// Guessing stays bounded: per window, an account takes EmailLimit attempts
// and then newAddressLimit from each further address (an IPv6 /64 is one),
// and each address AddrLimit attempts over all accounts; the password
// gate (gate.go) bounds how fast the server checks them at all.
//
// A success clears the email's and the pair's counters, gives the address
// counter its unit back and records the address as known for the email;
// a failure keeps the units taken. Counters start over when their window
// (LoginWindow) has passed since their first attempt.
const (
	defaultEmailLimit      = 10
	defaultAddrLimit       = 50
	defaultLoginWindow     = 15 * time.Minute
	defaultKnownAddressTTL = 90 * 24 * time.Hour
	// pruneEvery is how many logins pass between deletions of stale counters.
	pruneEvery = 500
)

// LoginAttempts is the shared state of login throttling (infra/store.Logins).
type LoginAttempts interface {
	// TakeLoginAttempt adds one attempt to the counter name unless it holds
	// limit attempts already in a window that started after windowStart
	// (an older window starts over at now). It reports whether it did.
	TakeLoginAttempt(ctx context.Context, name string, limit int, now, windowStart time.Time) (bool, error)
	// ReturnLoginAttempt takes one attempt back from the counter name.
	ReturnLoginAttempt(ctx context.Context, name string) error
	// ClearLoginAttempts deletes the counter name.
	ClearLoginAttempts(ctx context.Context, name string) error
	// PruneLoginAttempts deletes the counters whose window started before
	// windowStart and the known addresses last seen before seenBefore.
	PruneLoginAttempts(ctx context.Context, windowStart, seenBefore time.Time) error
	// KnownLoginAddress reports whether addr logged into email
	// successfully after since.
	KnownLoginAddress(ctx context.Context, email, addr string, since time.Time) (bool, error)
	// RememberLoginAddress records a successful login of email from addr.
	RememberLoginAddress(ctx context.Context, email, addr string, now time.Time) error
}

// limiter applies the throttling rules above.
type limiter struct {
	store    LoginAttempts
	email    int
	addr     int
	newAddr  int // attempts of an unknown address while the email is under attack
	window   time.Duration
	knownTTL time.Duration
	logins   atomic.Uint64
}

// counter names.
func addrCounter(addr string) string           { return "addr:" + addr }
func emailCounter(email string) string         { return "email:" + email }
func pairCounter(email, addr string) string    { return "pair:" + email + "|" + addr }
func newAddrCounter(email, addr string) string { return "new:" + email + "|" + addr }

// newAddressLimit is the attempts per window an address that never logged
// into an email gets at it while the email's counter is spent: a few, at
// most the email's own limit.
func newAddressLimit(emailLimit int) int { return min(3, emailLimit) }

// clientKey is the address a client is counted under: the address itself,
// or its /64 for IPv6 (one subscriber's usual allocation); "" stays "".
func clientKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// take counts an attempt of email from addr and returns nil when it may go
// on, or the refusal.
func (l *limiter) take(ctx context.Context, email, addr string, now time.Time) error {
	if l.logins.Add(1)%pruneEvery == 0 {
		if err := l.store.PruneLoginAttempts(ctx, now.Add(-l.window), now.Add(-l.knownTTL)); err != nil {
			return fmt.Errorf("auth: prune login attempts: %w", err)
		}
	}
	start := now.Add(-l.window)
	ok, err := l.store.TakeLoginAttempt(ctx, addrCounter(addr), l.addr, now, start)
	if err != nil {
		return fmt.Errorf("auth: login attempts: %w", err)
	}
	if !ok {
		return refusal("this address", l.window)
	}
	if ok, err = l.store.TakeLoginAttempt(ctx, pairCounter(email, addr), l.email, now, start); err != nil {
		return fmt.Errorf("auth: login attempts: %w", err)
	} else if !ok {
		return refusal("this email", l.window)
	}
	if ok, err = l.store.TakeLoginAttempt(ctx, emailCounter(email), l.email, now, start); err != nil {
		return fmt.Errorf("auth: login attempts: %w", err)
	} else if ok {
		return nil
	}
	known, err := l.store.KnownLoginAddress(ctx, email, addr, now.Add(-l.knownTTL))
	if err != nil {
		return fmt.Errorf("auth: known login address: %w", err)
	}
	if known {
		return nil
	}
	if ok, err = l.store.TakeLoginAttempt(ctx, newAddrCounter(email, addr), l.newAddr, now, start); err != nil {
		return fmt.Errorf("auth: login attempts: %w", err)
	} else if !ok {
		return refusal("this email from this address", l.window)
	}
	return nil
}

// succeeded records a successful login of email from addr.
func (l *limiter) succeeded(ctx context.Context, email, addr string, now time.Time) error {
	for _, err := range []error{
		l.store.ClearLoginAttempts(ctx, emailCounter(email)),
		l.store.ClearLoginAttempts(ctx, pairCounter(email, addr)),
		l.store.ClearLoginAttempts(ctx, newAddrCounter(email, addr)),
		l.store.ReturnLoginAttempt(ctx, addrCounter(addr)),
		l.store.RememberLoginAddress(ctx, email, addr, now),
	} {
		if err != nil {
			return fmt.Errorf("auth: login attempts: %w", err)
		}
	}
	return nil
}

// refusal is the answer to an attempt over one of the limits.
func refusal(what string, window time.Duration) error {
	return fault.New(fault.RateLimited, fmt.Sprintf("too many failed logins for %s: try again within %d minutes", what, int(window.Minutes()+0.999)))
}
