package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/auth"
	"threadbox/domain/fault"
)

// Browser sessions (docs/frontend.md "Sessions"): the web
// frontend signs in with refresh_cookie and gets a refresh token in an
// HttpOnly, SameSite=Strict cookie (Secure over https) that the browser
// sends only to refreshPath, and a short-lived access token it keeps in
// memory. Every call to refreshPath must carry refreshHeader: a header a
// page of another site cannot add without a CORS preflight this server
// never grants.
const (
	refreshPath   = "/api/v1/app/auth/refresh"
	refreshCookie = "threadbox_refresh"
	refreshHeader = "X-Threadbox-Refresh"
)

// sessionResponse is the answer to a browser sign-in or refresh.
func sessionResponse(bs auth.BrowserSession) tokenResponse {
	end := bs.Record.ExpiresAt()
	return tokenResponse{Token: bs.Access, ID: bs.Record.ID(), ExpiresAt: bs.AccessExpiresAt, SessionExpiresAt: &end}
}

// overHTTPS reports whether the browser reached the server over https:
// TLS here, or a trusted proxy's X-Forwarded-Proto.
func (s *Server) overHTTPS(c *fiber.Ctx) bool {
	if c.Context().IsTLS() {
		return true
	}
	return s.isTrusted(c.Context().RemoteIP().String()) && c.Get(fiber.HeaderXForwardedProto) == "https"
}

// setRefreshCookie sends the refresh token, for the refresh path only;
// an empty token deletes the cookie.
func (s *Server) setRefreshCookie(c *fiber.Ctx, token string, expires time.Time) {
	ck := &fiber.Cookie{
		Name: refreshCookie, Value: token, Path: refreshPath, Expires: expires,
		HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: s.overHTTPS(c),
	}
	if token == "" {
		ck.Expires = time.Unix(0, 0)
		ck.MaxAge = -1
	}
	c.Cookie(ck)
}

// requireRefreshHeader refuses a call to the refresh path without
// refreshHeader: 403 before the cookie is even read.
func requireRefreshHeader(c *fiber.Ctx) error {
	if c.Get(refreshHeader) != "1" {
		return fault.New(fault.Forbidden, "the session endpoint requires the header "+refreshHeader+": 1")
	}
	return nil
}

// refreshSession is POST /api/v1/app/auth/refresh: a new access token for
// the browser session of the refresh cookie. A refused cookie is deleted.
// A request without the cookie (a browser signed out, or never signed in)
// has no session to refresh: 204, not an error, so a signed-out page loads
// without a failed request.
func (s *Server) refreshSession(c *fiber.Ctx) error {
	if err := requireRefreshHeader(c); err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	cookie := c.Cookies(refreshCookie)
	if cookie == "" {
		return c.SendStatus(fiber.StatusNoContent)
	}
	bs, err := s.svc.Auth.Refresh(c.UserContext(), cookie)
	if err != nil {
		if fault.Is(err, fault.Unauthenticated) {
			s.setRefreshCookie(c, "", time.Time{})
		}
		return err
	}
	return c.JSON(sessionResponse(bs))
}

// endSession is DELETE /api/v1/app/auth/refresh: sign-out. It revokes the
// session of the refresh cookie, which ends its refresh token and every
// access token of it (in every tab), and deletes the cookie.
func (s *Server) endSession(c *fiber.Ctx) error {
	if err := requireRefreshHeader(c); err != nil {
		return err
	}
	if err := s.svc.Auth.EndSession(c.UserContext(), c.Cookies(refreshCookie)); err != nil {
		return err
	}
	s.setRefreshCookie(c, "", time.Time{})
	return c.SendStatus(fiber.StatusNoContent)
}
