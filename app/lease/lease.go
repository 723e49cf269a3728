// Package lease hands out named, expiring leases kept in the database, so
// that a decision taken by one threadbox process (booting a sandbox,
// running a thread's turn) is never taken twice at once by another process
// on the same database. A holder renews its leases while it lives; the
// leases of a process that died lapse after their time to live.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// Store keeps leases (infra/store.Leases).
type Store interface {
	// AcquireLease takes name for holder until the given time, unless
	// another holder has it until after now; it reports whether holder has
	// it now.
	AcquireLease(ctx context.Context, name, holder string, until, now time.Time) (bool, error)
	// RenewLeases moves every lease of holder forward to until.
	RenewLeases(ctx context.Context, holder string, until time.Time) error
	// ReleaseLease gives name back if holder has it.
	ReleaseLease(ctx context.Context, name, holder string) error
	// ReleaseLeases gives back every lease of holder.
	ReleaseLeases(ctx context.Context, holder string) error
	// LeaseHolder returns who holds name after now ("" for nobody).
	LeaseHolder(ctx context.Context, name string, now time.Time) (string, error)
}

// DefaultTTL is how long a lease outlives its holder's last renewal.
const DefaultTTL = 30 * time.Second

// Keeper takes leases for one process.
type Keeper struct {
	store  Store
	holder string
	ttl    time.Duration
	now    func() time.Time

	// pending are the leases whose release failed (the database could not
	// write): Renew would keep them alive for good, so it gives them back
	// first, until that succeeds.
	mu      sync.Mutex
	pending map[string]bool
}

// New returns a keeper for this process: holder names it (a fresh random id
// is appended, so a restarted process never mistakes the leases of its
// predecessor for its own), ttl bounds how long its leases outlive it (0
// means DefaultTTL).
func New(store Store, holder string, ttl time.Duration) *Keeper {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	if holder == "" {
		holder = "threadbox"
	}
	return &Keeper{store: store, holder: holder + "/" + hex.EncodeToString(b), ttl: ttl, now: time.Now}
}

// Holder names this process in the leases it holds.
func (k *Keeper) Holder() string { return k.holder }

// TTL returns how long a lease outlives its last renewal.
func (k *Keeper) TTL() time.Duration { return k.ttl }

// Acquire takes the lease name for this process; false when another live
// process holds it. Taking a lease this process holds again succeeds.
func (k *Keeper) Acquire(ctx context.Context, name string) (bool, error) {
	k.mu.Lock()
	delete(k.pending, name) // taken again: not to be given back
	k.mu.Unlock()
	now := k.now().UTC()
	ok, err := k.store.AcquireLease(ctx, name, k.holder, now.Add(k.ttl), now)
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", name, err)
	}
	return ok, nil
}

// Release gives the lease name back, if this process holds it.
// When the database cannot write, the release is retried by Renew until it
// succeeds (else the lease would be renewed for as long as the process
// lives).
func (k *Keeper) Release(ctx context.Context, name string) error {
	if err := k.store.ReleaseLease(ctx, name, k.holder); err != nil {
		k.mu.Lock()
		if k.pending == nil {
			k.pending = map[string]bool{}
		}
		k.pending[name] = true
		k.mu.Unlock()
		return fmt.Errorf("lease %s: release (retried at the next renewal): %w", name, err)
	}
	return nil
}

// releasePending gives back the leases whose release failed; the lock
// keeps an Acquire of the same name from racing the release.
func (k *Keeper) releasePending(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name := range k.pending {
		if err := k.store.ReleaseLease(ctx, name, k.holder); err != nil {
			return fmt.Errorf("lease %s: release: %w", name, err)
		}
		delete(k.pending, name)
	}
	return nil
}

// Holds reports who holds name: mine when this process does, other when
// another live process does (both false: nobody).
func (k *Keeper) Holds(ctx context.Context, name string) (mine, other bool, err error) {
	h, err := k.store.LeaseHolder(ctx, name, k.now().UTC())
	if err != nil {
		return false, false, fmt.Errorf("lease %s: %w", name, err)
	}
	return h == k.holder, h != "" && h != k.holder, nil
}

// Renew gives back the leases whose release failed, then moves every
// other lease of this process forward by the time to live.
func (k *Keeper) Renew(ctx context.Context) error {
	if err := k.releasePending(ctx); err != nil {
		return fmt.Errorf("lease: renew: %w", err)
	}
	if err := k.store.RenewLeases(ctx, k.holder, k.now().UTC().Add(k.ttl)); err != nil {
		return fmt.Errorf("lease: renew: %w", err)
	}
	return nil
}

// ReleaseAll gives back every lease of this process (a graceful stop: the
// next process takes over at once instead of waiting for them to lapse).
func (k *Keeper) ReleaseAll(ctx context.Context) error {
	if err := k.store.ReleaseLeases(ctx, k.holder); err != nil {
		return fmt.Errorf("lease: release all: %w", err)
	}
	return nil
}

// Run renews this process's leases every third of their time to live until
// ctx ends; ReleaseAll gives them back.
func (k *Keeper) Run(ctx context.Context, onError func(error)) {
	Every(ctx, k.ttl/3, func() {
		if err := k.Renew(ctx); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
	})
}

// Every calls do each interval, the first time one interval from now, until
// ctx ends: the beat at which a holder renews what lapses unless renewed (a
// lease, a claim on a piece of work) or a lease holder does its periodic job.
func Every(ctx context.Context, interval time.Duration, do func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			do()
		}
	}
}
