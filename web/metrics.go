package web

import (
	"crypto/subtle"

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
	if !s.hasScrapeToken(c) {
		return fault.New(fault.Unauthenticated, "the metrics need the scrape token (METRICS_TOKEN) as a bearer token")
	}
	return adaptor.HTTPHandler(s.opt.Metrics)(c)
}

// hasScrapeToken reports whether the request presents the operator's
// scrape token (METRICS_TOKEN) as its bearer token; without a token
// configured, no request does.
func (s *Server) hasScrapeToken(c *fiber.Ctx) bool {
	if s.opt.MetricsToken == "" {
		return false
	}
	tok, ok := bearerToken(c.Get(fiber.HeaderAuthorization))
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.opt.MetricsToken)) == 1
}
