package store

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// memo keeps the results of the per-request lookups (credentials, the
// Messages API's container) while the SQLite database is unchanged. One
// connection of the read pool is held for PRAGMA data_version, whose value
// changes whenever any other connection commits — threadbox's writer, or
// another process such as `threadbox token revoke` — so an entry is used
// only if nothing at all was committed since it was read: a revocation, a
// disabled user or org, a moved container is seen on the very next request,
// as without the memo. The version check costs a third of the lookup it
// replaces (no join, no row to scan); on Linux it is made only when the
// database's folder saw a write since the last one (dirWatch: one
// non-blocking read of an inotify queue, a few microseconds where the
// query, a read transaction with its locks, costs tens). PostgreSQL has no
// such cheap check, so it has no memo and queries every time.
type memo struct {
	db    *sql.DB
	watch *dirWatch // nil: the version is read on every lookup

	mu      sync.Mutex
	conn    *sql.Conn // holds the version statement's connection
	version *sql.Stmt
	at      int64          // the data_version the entries were read at
	entries map[string]any // by lookup and key
	closed  bool

	hits   atomic.Int64 // for tests
	checks atomic.Int64 // version queries, for tests
}

// memoMax bounds the entries kept between two commits.
const memoMax = 4096

// current returns the database's data_version, dropping every entry when it
// moved; ok is false when it cannot be read (the caller then queries).
func (m *memo) current(ctx context.Context) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, false
	}
	// Nothing written since the version was read: it still holds. The
	// watch forgets what it saw before the query below, so a commit made
	// after that query is seen by the next look.
	if m.watch != nil && m.watch.quiet() && m.entries != nil {
		return m.at, true
	}
	m.checks.Add(1)
	ctx = context.WithoutCancel(ctx)
	if m.version == nil {
		conn, err := m.db.Conn(ctx)
		if err != nil {
			m.entries = nil // what the watch saw is gone with it
			return 0, false
		}
		st, err := conn.PrepareContext(ctx, "PRAGMA data_version")
		if err != nil {
			conn.Close()
			m.entries = nil
			return 0, false
		}
		m.conn, m.version = conn, st
	}
	var v int64
	if err := m.version.QueryRowContext(ctx).Scan(&v); err != nil {
		m.version.Close()
		m.conn.Close()
		m.conn, m.version, m.entries = nil, nil, nil
		return 0, false
	}
	if v != m.at || m.entries == nil {
		m.at, m.entries = v, map[string]any{}
	}
	return v, true
}

// lookup returns the entry for key, or calls load and keeps its result.
// load runs after the version was read, so what it reads is at least as
// new as that version; an entry is never older than the version it is
// kept under.
func lookup[T any](ctx context.Context, m *memo, key string, load func() (T, error)) (T, error) {
	if m == nil {
		return load()
	}
	v, ok := m.current(ctx)
	if !ok {
		return load()
	}
	m.mu.Lock()
	e, hit := m.entries[key]
	m.mu.Unlock()
	if hit {
		m.hits.Add(1)
		return e.(T), nil
	}
	val, err := load()
	if err != nil {
		return val, err
	}
	m.mu.Lock()
	if m.at == v && len(m.entries) < memoMax {
		m.entries[key] = val
	}
	m.mu.Unlock()
	return val, nil
}

func (m *memo) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.watch != nil {
		m.watch.close()
	}
	if m.version != nil {
		m.version.Close()
		m.conn.Close()
	}
	m.entries = nil
}
