package web

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/id"
)

// recoverPanics turns a panic in a handler into a 500 in the error envelope,
// so no input can crash the server.
func (s *Server) recoverPanics(c *fiber.Ctx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler", "method", c.Method(), "path", c.Path(), "panic", fmt.Sprint(r))
			err = fiber.NewError(fiber.StatusInternalServerError, "internal server error")
		}
	}()
	return c.Next()
}

// survive, deferred directly in a goroutine a handler started (a stream
// writer), logs a panic there instead of letting it end the process; the
// middleware above sees only the handler's own goroutine.
func (s *Server) survive(what string) {
	if r := recover(); r != nil {
		s.log.Error("panic in "+what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	}
}

// accessLog gives each request an id — the request-id header of the
// answer, as Anthropic's API sends it, and request_id in error bodies — and
// logs one structured line per request with it.
func (s *Server) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	rid := id.New("req")
	c.Locals(requestIDKey{}, rid)
	c.Set("request-id", rid)
	err := c.Next()
	status := c.Response().StatusCode()
	if err != nil {
		status, _ = s.classify(err)
	}
	d := time.Since(start)
	s.log.Info("request", "method", c.Method(), "path", c.Path(), "status", status, "request_id", rid, "duration_ms", float64(d.Microseconds())/1000)
	if o := s.opt.Observer; o != nil {
		// fasthttp reuses the method's bytes: the observer may keep it.
		out := int64(c.Response().Header.ContentLength())
		if !c.Response().IsBodyStream() {
			out = int64(len(c.Response().Body()))
		}
		o.ObserveRequest(c.Route().Path, strings.Clone(c.Method()), status, d, int64(c.Request().Header.ContentLength()), out)
	}
	return err
}

// requestIDKey keys the request's id in the context's locals.
type requestIDKey struct{}

// requestID is the id accessLog gave the request ("" outside it).
func requestID(c *fiber.Ctx) string {
	rid, _ := c.Locals(requestIDKey{}).(string)
	return rid
}
