//go:build !unix

package web

import "net"

// peerClosed cannot inspect connections on this platform; failed writes
// still notice a client that went away.
func peerClosed(net.Conn) bool { return false }
