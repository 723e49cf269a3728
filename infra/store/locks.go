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
func (s *Store) LockArtifactBlobs(ctx context.Context, exclusive bool) (func(), error) {
	if s.dialect != "postgres" {
		return func() {}, nil
	}
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return nil, dbError("artifact blob lock", err)
	}
	lock, unlock := "SELECT pg_advisory_lock_shared($1)", "SELECT pg_advisory_unlock_shared($1)"
	if exclusive {
		lock, unlock = "SELECT pg_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"
	}
	if _, err := conn.ExecContext(ctx, lock, artifactBlobsLock); err != nil {
		conn.Close()
		return nil, dbError("artifact blob lock", err)
	}
	return func() { unlockOn(conn, unlock, artifactBlobsLock) }, nil
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
func (s *Store) Lock(ctx context.Context, key string) (func(), error) {
	if s.dialect != "postgres" {
		return func() {}, nil
	}
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return nil, dbError("lock", err)
	}
	var k int64
	if err := conn.QueryRowContext(ctx, "SELECT hashtextextended($1, 0)", key).Scan(&k); err != nil {
		conn.Close()
		return nil, dbError("lock", err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		conn.Close()
		return nil, dbError("lock", err)
	}
	return func() { unlockOn(conn, "SELECT pg_advisory_unlock($1)", k) }, nil
}
