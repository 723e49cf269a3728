package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"threadbox/domain/fault"
)

// TestTranslateDatabaseUnavailable: errors that say the database cannot
// answer now — PostgreSQL shutting down or starting, a refused or reset
// connection, SQLite locked past its busy timeout, a disk full — are fault.Unavailable
// (503, a retry may help) with a message that says so; errors of the
// request itself keep their kinds, PostgreSQL's refusal of a text value
// (a NUL, invalid UTF-8) is the request's (400), and other failures stay
// internal.
func TestTranslateDatabaseUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		want fault.Kind
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, fault.Unavailable},
		{"starting up", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, fault.Unavailable},
		{"connection failure", &pgconn.PgError{Code: "08006"}, fault.Unavailable},
		{"too many connections", &pgconn.PgError{Code: "53300"}, fault.Unavailable},
		{"connection refused", fmt.Errorf("failed to connect: %w", refused), fault.Unavailable},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), fault.Unavailable},
		{"bad connection", driver.ErrBadConn, fault.Unavailable},
		{"sqlite busy", errors.New("database is locked (5) (SQLITE_BUSY)"), fault.Unavailable},
		{"sqlite full", errors.New("database or disk is full (13)"), fault.Unavailable},
		{"postgres disk full", &pgconn.PgError{Code: "53100"}, fault.Unavailable},
		{"NUL in text", &pgconn.PgError{Code: "22021", Message: `invalid byte sequence for encoding "UTF8": 0x00`}, fault.Invalid},
		{"untranslatable text", &pgconn.PgError{Code: "22P05"}, fault.Invalid},
		{"syntax error", &pgconn.PgError{Code: "42601"}, fault.Internal},
		{"unique", errors.New("UNIQUE constraint failed: threads.id"), fault.Conflict},
		{"other", errors.New("disk I/O error"), fault.Internal},
		{"the caller's context", context.Canceled, fault.Internal},
	}
	for _, c := range cases {
		err := translate(c.err, "thread")
		if got := fault.KindOf(err); got != c.want {
			t.Errorf("%s: kind %q, want %q (%v)", c.name, got, c.want, err)
		}
		if c.want == fault.Unavailable {
			want := unavailableMessage
			if strings.Contains(c.name, "full") {
				want = diskFullMessage
			}
			if fault.MessageOf(err) != want || !errors.Is(err, c.err) {
				t.Errorf("%s: message %q, cause kept %v", c.name, fault.MessageOf(err), errors.Is(err, c.err))
			}
		}
	}
}
