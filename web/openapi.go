package web

import (
	_ "embed" // the OpenAPI document
	"slices"

	"github.com/gofiber/fiber/v2"
)

// openAPIDocument is the OpenAPI 3.1 document of every route in routes.go,
// kept beside them (docs/openapi.md says how it is kept true).
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI document the server serves
// at GET /api/openapi.json, for tests that validate requests and responses
// against it.
func OpenAPIDocument() []byte { return slices.Clone(openAPIDocument) }

// openAPI is GET /api/openapi.json: the OpenAPI document, unauthenticated.
func (s *Server) openAPI(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-cache")
	return c.Send(openAPIDocument)
}
