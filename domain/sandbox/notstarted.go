package sandbox

import "errors"

// ErrNotStarted marks the error of a command that never started: its
// sandbox could not be booted (or the request went before it was), or the
// command was refused before it ran. Usage metering counts every command
// that ended with any other error: it ran, and was cut short.
var ErrNotStarted = errors.New("the command did not start")

// NotStarted marks err as the error of a command that never started
// (ErrNotStarted), keeping its message and everything errors.Is and
// errors.As find in it; nil stays nil.
func NotStarted(err error) error {
	if err == nil || errors.Is(err, ErrNotStarted) {
		return err
	}
	return notStarted{err}
}

// notStarted is an error marked ErrNotStarted.
type notStarted struct{ err error }

func (e notStarted) Error() string   { return e.err.Error() }
func (e notStarted) Unwrap() []error { return []error{e.err, ErrNotStarted} }
