package web

import (
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// clientAddr is the address of the client that sent the request: the TCP
// peer, or, when the peer is one of the trusted proxies, the right-most
// address of X-Forwarded-For that is not a trusted proxy itself (the
// addresses to its left were written by the client and prove nothing).
func (s *Server) clientAddr(c *fiber.Ctx) string {
	peer := c.Context().RemoteIP().String()
	if len(s.trusted) == 0 || !s.isTrusted(peer) {
		return peer
	}
	hops := strings.Split(c.Get(fiber.HeaderXForwardedFor), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		h := strings.TrimSpace(hops[i])
		a, err := netip.ParseAddr(h)
		if err != nil {
			break // a malformed hop: trust nothing left of it
		}
		if !s.isTrusted(a.String()) {
			return a.Unmap().String()
		}
	}
	return peer
}

func (s *Server) isTrusted(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
