package sandbox

import "context"

// TTY is the size of a pseudo-terminal.
type TTY struct {
	Rows uint16
	Cols uint16
}

// Session is a long-lived command started in a sandbox. Its output goes to
// the Command's Output callback as it arrives and is not kept by the
// backend, so a session may print without bound.
type Session interface {
	// PID is the command's process id inside the sandbox.
	PID() int
	// Write sends bytes to the command's stdin (or terminal).
	Write(p []byte) (int, error)
	// Resize changes the size of the command's terminal.
	Resize(rows, cols uint16) error
	// Kill ends the command's whole process group.
	Kill() error
	// Done is closed when the command has ended.
	Done() <-chan struct{}
	// Wait waits for the end and returns how the command ended (its Stdout
	// and Stderr are empty); when the sandbox goes away first it returns an
	// error wrapping ErrUnavailable.
	Wait(ctx context.Context) (Result, error)
	// Offset counts the output bytes the command wrote before this
	// session attached to it (Command.Attach); 0 for one it started.
	Offset() int64
}
