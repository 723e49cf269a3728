package web

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Lingering close, as web servers do it: a connection the server closes
// while the client is still sending (a request header past the read
// buffer, answered 431) would otherwise be reset with the client's bytes
// unread, and the client would lose the answer. Closing first ends the
// server's side, then reads and discards what the client still sends for a
// moment before the socket goes.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 16 << 20
)

// writeStall is how long a write to a client may go without the client
// accepting a single byte of it. A client that stops reading an answer (a
// streamed turn, a download) would otherwise hold the server's goroutine,
// and a streamed turn with its model call and sandbox command, for as long
// as it keeps the connection open; the write fails instead, which ends the
// stream and cancels the turn. The deadline is on progress, not on the
// answer: a client that reads, however slowly and however long the turn,
// keeps it moving forward.
const writeStall = 30 * time.Second

// lingerListener hands out connections that close with a linger and whose
// writes fail after writeStall without progress.
type lingerListener struct{ net.Listener }

// Accept returns the next connection.
func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc, stall: writeStall}, nil
	}
	return c, nil
}

// lingerConn is a TCP connection whose Close lingers and whose writes
// fail when the client accepts nothing for stall. It keeps every method
// of *net.TCPConn (SyscallConn included: peerClosed needs it).
type lingerConn struct {
	*net.TCPConn
	stall time.Duration
	once  sync.Once

	// mu orders read deadlines; after Close, lingerEnd bounds them.
	mu        sync.Mutex
	lingerEnd time.Time
}

// SetReadDeadline sets the read deadline; once the connection is closing
// it never reaches past the linger's end. The server sets a deadline for
// the next request after a response, and a close from another goroutine
// (the graceful shutdown closing idle connections) can come between its
// decision to keep reading and that call: unbounded, the read would wait
// the whole idle timeout for a client that neither sends nor closes, and
// hold the shutdown with it.
func (c *lingerConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lingerEnd.IsZero() && (t.IsZero() || t.After(c.lingerEnd)) {
		t = c.lingerEnd
	}
	return c.TCPConn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines, the read one bounded as SetReadDeadline
// bounds it.
func (c *lingerConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.TCPConn.SetWriteDeadline(t)
}

// Write writes p, failing with os.ErrDeadlineExceeded once the client
// has accepted none of it for c.stall; each byte it accepts gives the
// rest another c.stall.
func (c *lingerConn) Write(p []byte) (int, error) {
	return writeProgressing(c.TCPConn, p, c.stall)
}

// writeProgressing writes p to conn under a deadline that moves forward
// whenever conn accepts some of it (a write that times out reports what
// it wrote), so only a write that makes no progress for stall fails. A
// connection without deadlines is written to plainly.
func writeProgressing(conn net.Conn, p []byte, stall time.Duration) (int, error) {
	done := 0
	for {
		if err := conn.SetWriteDeadline(time.Now().Add(stall)); err != nil {
			n, werr := conn.Write(p[done:])
			return done + n, werr
		}
		n, err := conn.Write(p[done:])
		done += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return done, err
		}
	}
}

// Close ends the server's side at once and lets the socket go once the
// client has stopped sending (or after lingerTime and lingerBytes).
func (c *lingerConn) Close() error {
	c.once.Do(func() {
		if err := c.TCPConn.CloseWrite(); err != nil {
			_ = c.TCPConn.Close()
			return
		}
		c.mu.Lock()
		c.lingerEnd = time.Now().Add(lingerTime)
		_ = c.TCPConn.SetReadDeadline(c.lingerEnd)
		c.mu.Unlock()
		go func() {
			_, _ = io.CopyN(io.Discard, c.TCPConn, lingerBytes)
			_ = c.TCPConn.Close()
		}()
	})
	return nil
}
