package web

import (
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
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

// accessLog logs one structured line per request.
func (s *Server) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	status := c.Response().StatusCode()
	if err != nil {
		status, _ = s.classify(err)
	}
	s.log.Info("request", "method", c.Method(), "path", c.Path(), "status", status, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	return err
}
