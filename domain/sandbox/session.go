package sandbox

import (
	"context"
	"net"
)

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
}

// Sessions is implemented by backends that can start long-lived commands,
// optionally on a pseudo-terminal. Sessions end with their sandbox.
type Sessions interface {
	// Start starts cmd in the running sandbox id and returns once it runs.
	// A nil tty runs it on pipes. cmd.Timeout and cmd.MaxOutput are ignored.
	Start(ctx context.Context, id string, cmd Command, tty *TTY) (Session, error)
}

// Forwarder is implemented by backends that can listen on a loopback
// address inside the sandbox and hand each accepted connection to the host.
// The listener ends with the sandbox.
type Forwarder interface {
	// Listen listens on addr (a loopback host:port) inside the sandbox id.
	Listen(ctx context.Context, id, addr string) (net.Listener, error)
}
