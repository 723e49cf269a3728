package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// uiFiles are the frontend's static assets (docs/frontend.md): plain HTML, CSS and
// JavaScript modules, served as they are, with no build step.
//
//go:embed ui
var uiFiles embed.FS

// uiCSP lets the page load only its own scripts, styles and images;
// blob: images are the previews the page fetches with its bearer token.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// uiType returns the content type of an asset by its extension; fixed
// here so the answer never depends on the host's MIME tables.
func uiType(ext string) (string, bool) {
	switch ext {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".svg":
		return "image/svg+xml", true
	case ".png":
		return "image/png", true
	}
	return "", false
}

// uiIndex is GET /: the single page of the frontend.
func (s *Server) uiIndex(c *fiber.Ctx) error {
	return sendUIAsset(c, "index.html")
}

// uiAsset is GET /ui/{name}: one embedded asset.
func (s *Server) uiAsset(c *fiber.Ctx) error {
	return sendUIAsset(c, c.Params("*"))
}

// sendUIAsset answers with the embedded asset name, revalidated by ETag on
// every use (the names carry no version, so nothing is cached blindly).
func sendUIAsset(c *fiber.Ctx, name string) error {
	ct, ok := uiType(path.Ext(name))
	if !ok || !fs.ValidPath(name) || strings.HasPrefix(path.Base(name), ".") {
		return fault.New(fault.NotFound, "no asset "+name)
	}
	b, err := fs.ReadFile(uiFiles, "ui/"+name)
	if err != nil {
		return fault.New(fault.NotFound, "no asset "+name)
	}
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:12]) + `"`
	c.Set(fiber.HeaderContentSecurityPolicy, uiCSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderETag, etag)
	if match := c.Get(fiber.HeaderIfNoneMatch); match != "" && etagMatches(match, etag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	c.Set(fiber.HeaderContentType, ct)
	return c.Send(b)
}

// etagMatches reports whether an If-None-Match header names etag.
func etagMatches(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == etag || v == "*" {
			return true
		}
	}
	return false
}
