package store

import (
	"context"
	"time"
)

// Login throttling (app/auth): counters of login attempts taken by one
// conditional upsert each, so concurrent attempts and several servers on one
// database share one count, and the addresses each email logged in from.

// takeLoginSQL adds an attempt to a counter whose window is still open and
// below the limit, or starts the counter over when its window has passed;
// a counter at its limit is left alone (no row affected).
const takeLoginSQL = `INSERT INTO login_attempts (name, attempts, window_start) VALUES (?, 1, ?)
ON CONFLICT (name) DO UPDATE SET
  attempts = CASE WHEN login_attempts.window_start <= ? THEN 1 ELSE login_attempts.attempts + 1 END,
  window_start = CASE WHEN login_attempts.window_start <= ? THEN excluded.window_start ELSE login_attempts.window_start END
WHERE login_attempts.window_start <= ? OR login_attempts.attempts < ?`

// TakeLoginAttempt adds one attempt to the counter name unless it holds
// limit attempts in a window that started after windowStart.
func (s Logins) TakeLoginAttempt(ctx context.Context, name string, limit int, now, windowStart time.Time) (bool, error) {
	ws := windowStart.UTC()
	res := s.q(ctx).Exec(takeLoginSQL, name, now.UTC(), ws, ws, ws, limit)
	if res.Error != nil {
		return false, dbError("take login attempt", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// ReturnLoginAttempt takes one attempt back from the counter name.
func (s Logins) ReturnLoginAttempt(ctx context.Context, name string) error {
	return s.exec(ctx, "return login attempt", `UPDATE login_attempts SET attempts = attempts - 1 WHERE name = ? AND attempts > 0`, name)
}

// ClearLoginAttempts deletes the counter name.
func (s Logins) ClearLoginAttempts(ctx context.Context, name string) error {
	return s.exec(ctx, "clear login attempts", `DELETE FROM login_attempts WHERE name = ?`, name)
}

// PruneLoginAttempts deletes counters whose window started before
// windowStart and known addresses last seen before seenBefore.
func (s Logins) PruneLoginAttempts(ctx context.Context, windowStart, seenBefore time.Time) error {
	if err := s.q(ctx).Exec(`DELETE FROM login_attempts WHERE window_start <= ?`, windowStart.UTC()).Error; err != nil {
		return dbError("prune login attempts", err)
	}
	return s.exec(ctx, "prune login addresses", `DELETE FROM login_addresses WHERE seen_at <= ?`, seenBefore.UTC())
}

// KnownLoginAddress reports whether addr logged into email after since.
func (s Logins) KnownLoginAddress(ctx context.Context, email, addr string, since time.Time) (bool, error) {
	var n int64
	if err := s.q(ctx).Raw(`SELECT COUNT(*) FROM login_addresses WHERE email = ? AND addr = ? AND seen_at > ?`, email, addr, since.UTC()).Scan(&n).Error; err != nil {
		return false, dbError("known login address", err)
	}
	return n > 0, nil
}

// RememberLoginAddress records a successful login of email from addr.
func (s Logins) RememberLoginAddress(ctx context.Context, email, addr string, now time.Time) error {
	err := s.q(ctx).Exec(`INSERT INTO login_addresses (email, addr, seen_at) VALUES (?, ?, ?)
ON CONFLICT (email, addr) DO UPDATE SET seen_at = excluded.seen_at`, email, addr, now.UTC()).Error
	if err != nil {
		return dbError("remember login address", err)
	}
	return nil
}
