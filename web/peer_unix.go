//go:build unix

package web

import (
	"net"
	"syscall"
)

// peerClosed reports whether the client closed conn: a non-blocking peek
// reads end of file. Pipelined bytes, an open connection or a connection
// that cannot be inspected all count as open; nothing is consumed.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err == syscall.ECONNRESET
		return true
	})
	return closed
}
