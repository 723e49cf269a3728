package web

import (
	"crypto/subtle"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"threadbox/domain/fault"
)

// metrics is GET /metrics: the Prometheus metrics, for a scraper that
// presents METRICS_TOKEN as a bearer token. Without a token configured
// there is no such endpoint.
func (s *Server) metrics(c *fiber.Ctx) error {
	if s.opt.Metrics == nil || s.opt.MetricsToken == "" {
		return fault.New(fault.NotFound, "not found")
	}
	tok, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.opt.MetricsToken)) != 1 {
		return fault.New(fault.Unauthenticated, "the metrics need the scrape token (METRICS_TOKEN) as a bearer token")
	}
	return adaptor.HTTPHandler(s.opt.Metrics)(c)
}
