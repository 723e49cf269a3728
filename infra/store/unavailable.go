package store

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"threadbox/domain/fault"
)

// unavailableMessage is what a caller is told when the database cannot
// answer: the request may succeed if sent again.
const unavailableMessage = "the database is unavailable (restarting or unreachable); try again shortly"

// diskFullMessage is what a caller is told when the database's disk is
// full: the request may succeed later, once space was freed.
const diskFullMessage = "the server's disk is full; try again later"

// unstorableMessage is what a caller is told when PostgreSQL refuses a
// text value of the request: its text types hold neither NUL characters
// nor bytes that are not UTF-8.
const unstorableMessage = "the request holds text the database cannot take: a NUL character (\\u0000) or bytes that are not UTF-8"

// unstorableText reports whether err is PostgreSQL refusing a text value:
// character_not_in_repertoire (22021: a NUL, invalid UTF-8) or
// untranslatable_character (22P05). Such values come from the request (a
// name, a title, a query parameter), so the request is answered as
// invalid rather than as the server's failure.
func unstorableText(err error) bool {
	var pgErr *pgconn.PgError
	return fault.KindOf(err) == fault.Internal && errors.As(err, &pgErr) && (pgErr.Code == "22021" || pgErr.Code == "22P05")
}

// diskFull reports whether err says the database could not write for
// want of disk space (SQLite's SQLITE_FULL, PostgreSQL's disk_full).
func diskFull(err error) bool {
	if err == nil || fault.KindOf(err) != fault.Internal {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "53100"
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_FULL") || strings.Contains(msg, "database or disk is full")
}

// unavailable reports whether err says the database could not be reached
// or is going away, rather than that the request was wrong: a refused or
// reset connection, PostgreSQL shutting down, starting up or out of
// connections, SQLite still locked when its busy timeout ran out.
func unavailable(err error) bool {
	if err == nil || fault.KindOf(err) != fault.Internal {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exception; 57P01-57P03: admin or crash shutdown,
		// cannot connect now; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	var connErr *pgconn.ConnectError
	var netErr *net.OpError
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked") ||
		strings.Contains(msg, "conn closed")
}

// dbError wraps a database error of the operation what: one that says the
// database is unavailable or its disk full becomes fault.Unavailable
// (answered 503, a retry may help), one refusing a text value of the
// request fault.Invalid (400), any other stays an internal error.
func dbError(what string, err error) error {
	if unstorableText(err) {
		return fault.Wrap(fault.Invalid, unstorableMessage, fmt.Errorf("store: %s: %w", what, err))
	}
	if diskFull(err) {
		return fault.Wrap(fault.Unavailable, diskFullMessage, fmt.Errorf("store: %s: %w", what, err))
	}
	if unavailable(err) {
		return fault.Wrap(fault.Unavailable, unavailableMessage, fmt.Errorf("store: %s: %w", what, err))
	}
	return fmt.Errorf("store: %s: %w", what, err)
}
