package web

import (
	"io"
	"net"
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

// lingerListener hands out connections that close with a linger.
type lingerListener struct{ net.Listener }

// Accept returns the next connection.
func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, nil
}

// lingerConn is a TCP connection whose Close lingers. It keeps every
// method of *net.TCPConn (SyscallConn included: peerClosed needs it).
type lingerConn struct {
	*net.TCPConn
	once sync.Once
}

// Close ends the server's side at once and lets the socket go once the
// client has stopped sending (or after lingerTime and lingerBytes).
func (c *lingerConn) Close() error {
	c.once.Do(func() {
		if err := c.TCPConn.CloseWrite(); err != nil {
			_ = c.TCPConn.Close()
			return
		}
		go func() {
			_ = c.TCPConn.SetReadDeadline(time.Now().Add(lingerTime))
			_, _ = io.CopyN(io.Discard, c.TCPConn, lingerBytes)
			_ = c.TCPConn.Close()
		}()
	})
	return nil
}
