// Package store persists the domain aggregates through GORM, on PostgreSQL
// or on an embedded pure-Go SQLite file. The schema comes only from the
// versioned SQL in migrations/, applied with goose.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/libtnb/sqlite"
	"github.com/pressly/goose/v3"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"threadbox/domain/fault"
	"threadbox/migrations"
)

// Store is the database: it opens, migrates and closes it, runs
// transactions, and hands out the repositories, one per aggregate, that
// share its one handle (repos.go). Consumers are given a repository, never
// the Store.
type Store struct{ *handle }

// handle is the connections every repository of one database shares.
type handle struct {
	db    *gorm.DB
	sqlDB *sql.DB
	// txdb runs transactions: the same connections without GORM's
	// prepared-statement cache. A request for a statement being prepared
	// waits for it holding the cache's read lock, and the preparation may
	// wait for the connection a transaction holds; were the transaction
	// to prepare a new statement it would need the cache's write lock, and
	// all three would wait for ever (SQLite's single writer connection made
	// it happen after a restart, the cache cold).
	txdb *gorm.DB

	reads *reads // shared by the handles of a transaction
	bound bool   // bound to a transaction: every read goes through it

	dialect string
	url     string
	// local hands revoked tokens to this Store's watchers on SQLite
	// (Notices).
	local *localNotices
}

// Open connects to PostgreSQL when url is set, else to the SQLite file
// threadbox.db in dataDir. It does not migrate.
func Open(ctx context.Context, url, dataDir string) (*Store, error) {
	// PrepareStmt caches prepared statements per connection, so hot queries
	// (authentication runs one per request) are parsed once.
	// Single writes run without GORM's default transaction (the store has
	// no hooks or associations for one to cover): a transaction must not
	// prepare through this cache (see txdb).
	cfg := &gorm.Config{Logger: logger.Discard, TranslateError: true, PrepareStmt: true, SkipDefaultTransaction: true, NowFunc: func() time.Time { return time.Now().UTC() }}
	var (
		db      *gorm.DB
		err     error
		dialect string
		dsn     string
	)
	if url != "" {
		dialect = "postgres"
		db, err = gorm.Open(postgres.Open(url), cfg)
	} else {
		dialect = "sqlite"
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("store: data dir: %w", err)
		}
		dsn = sqliteURI(filepath.Join(dataDir, "threadbox.db")) + "?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=journal_size_limit(1048576)"
		db, err = gorm.Open(sqlite.Open(dsn), cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dialect, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if dialect == "sqlite" {
		// One writer at a time; readers share the WAL.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(20)
		sqlDB.SetMaxIdleConns(10)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("store: connect %s: %w", dialect, err)
	}
	readDB := sqlDB
	if dialect == "sqlite" {
		// Opened after the writer, which set journal_mode(WAL) on the file.
		if readDB, err = sql.Open("sqlite", dsn+"&_pragma=query_only(1)"); err != nil {
			sqlDB.Close()
			return nil, fmt.Errorf("store: open sqlite readers: %w", err)
		}
		readDB.SetMaxOpenConns(sqliteReaders)
		readDB.SetMaxIdleConns(sqliteReaders)
	}
	txCfg := &gorm.Config{Logger: logger.Discard, TranslateError: true, NowFunc: cfg.NowFunc}
	var txDialector gorm.Dialector = sqlite.Dialector{Conn: sqlDB}
	if dialect == "postgres" {
		txDialector = postgres.New(postgres.Config{Conn: sqlDB})
	}
	txdb, err := gorm.Open(txDialector, txCfg)
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("store: open %s for transactions: %w", dialect, err)
	}
	rd := &reads{db: readDB}
	if dialect == "sqlite" {
		rd.memo = &memo{db: readDB, shm: filepath.Join(dataDir, "threadbox.db-shm")}
	}
	return &Store{&handle{db: db, sqlDB: sqlDB, txdb: txdb, reads: rd, dialect: dialect, url: url, local: &localNotices{}}}, nil
}

// sqliteURI returns the URI filename SQLite opens path by: "%", "?" and
// "#" in the path are escaped, or the driver would take what follows them
// for the URI's parameters or fragment and open another file.
func sqliteURI(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

// reads serves the lookups every request makes (credentials, the
// Messages API's container) as statements prepared once: for SQLite on a
// small pool of read-only connections beside the single writer (WAL readers
// never wait for it), for PostgreSQL on the main pool.
type reads struct {
	db   *sql.DB
	memo *memo // SQLite only (memo.go)

	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	closed bool
}

// stmt returns query prepared, preparing it on first use.
func (r *reads) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("store: closed")
	}
	if st := r.stmts[query]; st != nil {
		return st, nil
	}
	st, err := r.db.PrepareContext(context.WithoutCancel(ctx), query)
	if err != nil {
		return nil, fmt.Errorf("store: prepare: %w", err)
	}
	if r.stmts == nil {
		r.stmts = map[string]*sql.Stmt{}
	}
	r.stmts[query] = st
	return st, nil
}

// queryRow runs a prepared lookup. It does not pass ctx's cancellation on:
// a cancellable context costs database/sql and the driver a watcher
// goroutine each, and these indexed lookups are over in microseconds.
func (r *reads) queryRow(ctx context.Context, query string, args ...any) (*sql.Row, error) {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(context.WithoutCancel(ctx), args...), nil
}

func (r *reads) close(main *sql.DB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.memo != nil {
		r.memo.close()
	}
	for _, st := range r.stmts {
		_ = st.Close()
	}
	if r.db != main {
		_ = r.db.Close()
	}
}

// sqliteReaders is the size of the SQLite read-only pool: four for the
// lookups and one the memo holds.
const sqliteReaders = 5

// URL returns the PostgreSQL URL the store was opened with, or "" for SQLite.
func (s *Store) URL() string { return s.url }

// Dialect returns "postgres" or "sqlite".
func (s *Store) Dialect() string { return s.dialect }

// Close closes the connection pool.
func (s *Store) Close() error {
	s.reads.close(s.sqlDB)
	return s.sqlDB.Close()
}

func (h *handle) provider() (*goose.Provider, error) {
	var (
		d    goose.Dialect
		fsys fs.FS
		err  error
	)
	if h.dialect == "postgres" {
		d = goose.DialectPostgres
		fsys, err = fs.Sub(migrations.Postgres, "postgres")
	} else {
		d = goose.DialectSQLite3
		fsys, err = fs.Sub(migrations.SQLite, "sqlite")
	}
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(d, h.sqlDB, fsys)
}

// Migrate applies every pending migration and returns the schema version.
func (s *Store) Migrate(ctx context.Context) (int64, error) {
	p, err := s.provider()
	if err != nil {
		return 0, fmt.Errorf("store: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	return p.GetDBVersion(ctx)
}

// Ready reports nil when the database answers and has no pending migration.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	p, err := s.provider()
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("store: migration status: %w", err)
	}
	if pending {
		return ErrPending
	}
	return nil
}

// ErrPending is Ready's answer for a database that answers but has
// migrations to apply (serve applies them at start).
var ErrPending = errors.New("store: migrations pending")

// InTx runs fn with a Store bound to one transaction: every repository
// it hands out works in that transaction.
func (s *Store) InTx(ctx context.Context, fn func(tx *Store) error) error {
	return s.inTx(ctx, func(tx *handle) error { return fn(&Store{tx}) })
}

// inTx runs fn with a handle bound to one transaction.
func (h *handle) inTx(ctx context.Context, fn func(tx *handle) error) error {
	err := h.txq(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(&handle{db: tx, sqlDB: h.sqlDB, reads: h.reads, bound: true, dialect: h.dialect, local: h.local})
	})
	if unavailable(err) || diskFull(err) {
		// A transaction that could not begin or commit; fn's own errors
		// were translated already.
		return dbError("transaction", err)
	}
	return err
}

// translate maps GORM errors onto fault kinds.
func translate(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		return fault.Errorf(fault.NotFound, "%s not found", what)
	case errors.Is(err, gorm.ErrDuplicatedKey), strings.Contains(err.Error(), "UNIQUE constraint failed"):
		return fault.Wrap(fault.Conflict, what+" already exists", err)
	case errors.Is(err, gorm.ErrForeignKeyViolated), strings.Contains(err.Error(), "FOREIGN KEY constraint failed"):
		return fault.Wrap(fault.Invalid, what+" refers to something that does not exist", err)
	}
	return dbError(what, err)
}

// one checks that exactly one row was affected.
func one(res *gorm.DB, what string) error {
	if res.Error != nil {
		return translate(res.Error, what)
	}
	if res.RowsAffected == 0 {
		return fault.Errorf(fault.NotFound, "%s not found", what)
	}
	return nil
}

func (h *handle) q(ctx context.Context) *gorm.DB { return h.db.WithContext(ctx) }

// Now is the database's clock: PostgreSQL's now(); the embedded SQLite's
// is this host's.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if s.dialect != "postgres" {
		return time.Now(), nil
	}
	var t time.Time
	if err := s.sqlDB.QueryRowContext(ctx, "SELECT now()").Scan(&t); err != nil {
		return time.Time{}, dbError("now", err)
	}
	return t, nil
}

// txq is where a transaction begins: txdb, or in a handle bound to a
// transaction the transaction itself (a nested one is a savepoint).
func (h *handle) txq(ctx context.Context) *gorm.DB {
	if h.txdb == nil {
		return h.db.WithContext(ctx)
	}
	return h.txdb.WithContext(ctx)
}
