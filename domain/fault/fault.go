// Package fault gives errors a kind that the edges map to statuses, so that
// use cases can say "not found" or "forbidden" without knowing about HTTP.
package fault

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Kind classifies an error for the edges.
type Kind string

// The kinds of errors.
const (
	Invalid         Kind = "invalid"
	Unauthenticated Kind = "unauthenticated"
	Forbidden       Kind = "forbidden"
	NotFound        Kind = "not_found"
	Conflict        Kind = "conflict"
	TooLarge        Kind = "too_large"
	RateLimited     Kind = "rate_limited"
	Unavailable     Kind = "unavailable"
	// Upstream: a service the request relies on (the model's upstream)
	// answered with an error of its own.
	Upstream Kind = "upstream"
	// Timeout: the request took longer than it may.
	Timeout  Kind = "timeout"
	Internal Kind = "internal"
)

// Error is an error with a kind and a message safe to show to the caller.
type Error struct {
	Kind    Kind
	Message string
	Err     error // optional cause, never shown
}

// Error returns the message, with the cause when there is one.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind k with a caller-safe message.
func New(k Kind, msg string) error { return &Error{Kind: k, Message: msg} }

// Errorf returns an error of kind k with a formatted caller-safe message.
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k with a caller-safe message and a hidden cause.
func Wrap(k Kind, msg string, cause error) error { return &Error{Kind: k, Message: msg, Err: cause} }

// Text returns s without its surrounding white space, or an Invalid
// error saying that what must be 1 to max characters when nothing is left
// or more than max bytes are, and that it must be UTF-8 text without NUL
// characters when it is not: the check of a name or a title. PostgreSQL's
// text holds neither a NUL nor bytes that are not UTF-8, so refusing them
// here makes both databases take the same names.
func Text(what, s string, max int) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > max {
		return "", Errorf(Invalid, "%s must be 1 to %d characters", what, max)
	}
	if !Storable(s) {
		return "", Errorf(Invalid, "%s must be UTF-8 text without NUL characters", what)
	}
	return s, nil
}

// Storable reports whether s is text every database of the product can
// store: UTF-8 without NUL characters.
func Storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// KindOf returns the kind of the first *Error in err's chain, or Internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// MessageOf returns the caller-safe message of err, or a generic one.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal server error"
}

// FirstLine returns err's text up to its first line break: a cause told
// in a one-line note (a command's output, say, may follow it).
func FirstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// Is reports whether err has kind k.
func Is(err error, k Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}
