package store

import (
	"context"
	"time"
)

// Leases (app/lease): one row per named lease, taken by a conditional
// upsert so that two processes racing for one name meet on the primary key
// and only one wins.

// acquireLeaseSQL takes a lease that is free, lapsed, or already the
// holder's; the update's WHERE leaves a live lease of another holder alone
// (no row affected).
const acquireLeaseSQL = `INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leases.holder = excluded.holder OR leases.expires_at <= ?`

// AcquireLease takes name for holder until the given time unless another
// holder has it past now.
func (s Leases) AcquireLease(ctx context.Context, name, holder string, until, now time.Time) (bool, error) {
	res := s.q(ctx).Exec(acquireLeaseSQL, name, holder, until.UTC(), now.UTC())
	if res.Error != nil {
		return false, dbError("acquire lease", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// RenewLeases moves every lease of holder forward to until.
func (s Leases) RenewLeases(ctx context.Context, holder string, until time.Time) error {
	return s.exec(ctx, "renew leases", `UPDATE leases SET expires_at = ? WHERE holder = ?`, until.UTC(), holder)
}

// ReleaseLease gives name back if holder has it.
func (s Leases) ReleaseLease(ctx context.Context, name, holder string) error {
	return s.exec(ctx, "release lease", `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder)
}

// ReleaseLeases gives back every lease of holder.
func (s Leases) ReleaseLeases(ctx context.Context, holder string) error {
	return s.exec(ctx, "release leases", `DELETE FROM leases WHERE holder = ?`, holder)
}

// LeaseHolder returns who holds name past now, or "".
func (s Leases) LeaseHolder(ctx context.Context, name string, now time.Time) (string, error) {
	var holders []string
	if err := s.q(ctx).Raw(`SELECT holder FROM leases WHERE name = ? AND expires_at > ?`, name, now.UTC()).Scan(&holders).Error; err != nil {
		return "", dbError("lease holder", err)
	}
	if len(holders) == 0 {
		return "", nil
	}
	return holders[0], nil
}
