package web

import (
	"github.com/gofiber/fiber/v2"

	"threadbox/app/credentials"
	"threadbox/app/files"
)

// withCredentials returns the content a download sends: the signed form
// of a generated media file when Content Credentials apply
// (docs/content-credentials.md), otherwise ct as it is. On an error ct's
// body is closed.
func (s *Server) withCredentials(c *fiber.Ctx, ct files.Content, prov credentials.Provenance) (files.Content, error) {
	return s.svc.Credentials.Apply(c.UserContext(), principal(c), ct, prov)
}
