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
// replaces (no join, no row to scan); on Unix systems it is made only when
// the header of the database's WAL index changed since the last look
// (walIndex: a read of shared memory, where the query, a read transaction
// with its locks, costs tens of microseconds). PostgreSQL has no such cheap
// check, so it has no memo and queries every time.
type memo struct {
	db  *sql.DB
	shm string // the database's WAL index (-shm file); "": none to map

	mu      sync.Mutex
	conn    *sql.Conn // holds the version statement's connection
	version *sql.Stmt
	index   *walIndex      // mapped while conn is open; nil: the version is read on every lookup
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
	// Nothing committed since the version was read: it still holds. The
	// index remembers the header it read before the query below, so a
	// commit that returns after that read is seen by the next look.
	if m.index != nil && m.index.quiet() && m.entries != nil {
		return m.at, true
	}
	m.checks.Add(1)
	ctx = context.WithoutCancel(ctx)
	if m.version == nil {
		conn, err := m.db.Conn(ctx)
		if err != nil {
			m.entries = nil
			return 0, false
		}
		st, err := conn.PrepareContext(ctx, "PRAGMA data_version")
		if err != nil {
			conn.Close()
			m.entries = nil
			return 0, false
		}
		m.conn, m.version = conn, st
		m.mapIndex(ctx)
	}
	var v int64
	if err := m.version.QueryRowContext(ctx).Scan(&v); err != nil {
		m.release()
		m.entries = nil
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

// mapIndex maps the WAL index once the version's connection is attached
// (its first query takes the database's shared lock, which it then holds)
// and reads the header once, so that the query that follows is covered.
// Without a mapping the version is read on every lookup.
func (m *memo) mapIndex(ctx context.Context) {
	if m.shm == "" {
		return
	}
	var v int64
	if err := m.version.QueryRowContext(ctx).Scan(&v); err != nil {
		return
	}
	ix, err := openWALIndex(m.shm)
	if err != nil {
		return
	}
	ix.quiet()
	m.index = ix
}

// release closes the version's connection and unmaps the index, which
// must not outlive it.
func (m *memo) release() {
	if m.index != nil {
		m.index.close()
		m.index = nil
	}
	if m.version != nil {
		m.version.Close()
		m.conn.Close()
		m.conn, m.version = nil, nil
	}
}

func (m *memo) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.release()
	m.entries = nil
}
