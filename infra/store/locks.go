package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"
)

// artifactBlobsLock is the PostgreSQL advisory lock key of the artifact
// blobs (an arbitrary constant, "tbblobs" in ASCII).
const artifactBlobsLock int64 = 0x7462626c6f6273

// LockArtifactBlobs takes the read-write lock that orders artifact saves
// against blob removals across every server on the database: on
// PostgreSQL a session advisory lock held on a connection of its own until
// release is called; on the embedded SQLite, which one process uses alone,
// nothing (the caller's own lock suffices).
func (s Locks) LockArtifactBlobs(ctx context.Context, exclusive bool) (func(), error) {
	if s.dialect != "postgres" {
		return func() {}, nil
	}
	lock, unlock := "SELECT pg_advisory_lock_shared($1)", "SELECT pg_advisory_unlock_shared($1)"
	if exclusive {
		lock, unlock = "SELECT pg_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"
	}
	return s.sessionLock(ctx, "artifact blob lock", lock, unlock, artifactBlobsLock, "")
}

// sessionLock runs lock with key on a PostgreSQL connection of its own and
// returns the function that runs unlock with it and gives the connection
// back (unlockOn). When name is set the key is its 64-bit hash instead.
func (h *handle) sessionLock(ctx context.Context, what, lock, unlock string, key int64, name string) (func(), error) {
	conn, err := h.sqlDB.Conn(ctx)
	if err != nil {
		return nil, dbError(what, err)
	}
	if name != "" {
		if err := conn.QueryRowContext(ctx, "SELECT hashtextextended($1, 0)", name).Scan(&key); err != nil {
			conn.Close()
			return nil, dbError(what, err)
		}
	}
	if _, err := conn.ExecContext(ctx, lock, key); err != nil {
		conn.Close()
		return nil, dbError(what, err)
	}
	return func() { unlockOn(conn, unlock, key) }, nil
}

// unlockOn gives back an advisory lock held on conn and returns conn to
// the pool. A connection that may still hold the lock never goes back: it
// is discarded, which ends its session and so the lock.
func unlockOn(conn *sql.Conn, unlock string, key int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, unlock, key); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	conn.Close()
}

// Lock takes the named lock that every server on the database shares (a
// PostgreSQL session advisory lock on the key's 64-bit hash, held on a
// connection of its own until release is called) and returns the function
// that gives it back. On the embedded SQLite, which one process uses
// alone, it takes nothing.
func (s Locks) Lock(ctx context.Context, key string) (func(), error) {
	if s.dialect != "postgres" {
		return func() {}, nil
	}
	return s.sessionLock(ctx, "lock", "SELECT pg_advisory_lock($1)", "SELECT pg_advisory_unlock($1)", 0, key)
}

// leaseWanted is the PostgreSQL notification channel on which a server
// asks the holder of a lease to hand it over.
const leaseWanted = "threadbox_lease_wanted"

// WantLease tells every server on the database that the named lease is
// wanted (a PostgreSQL notification, heard through Notices.Watch; on the
// embedded SQLite, which one process uses alone, nothing).
func (s Leases) WantLease(ctx context.Context, name string) error {
	if s.dialect != "postgres" {
		return nil
	}
	if _, err := s.sqlDB.ExecContext(ctx, "SELECT pg_notify($1, $2)", leaseWanted, name); err != nil {
		return dbError("want lease", err)
	}
	return nil
}
