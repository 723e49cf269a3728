package web

import (
	"net/url"
	"regexp"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// Streamed downloads: the chat downloads a file with a plain
// link, which the browser saves to disk as it arrives, instead of fetching
// it into page memory. A link sends no Authorization header, so the page
// first asks POST /download-url for a URL that carries a ticket: signed,
// valid for a minute, for that one file, and bound to the caller's session
// or token (revoking either ends it).

var (
	threadFileURL  = regexp.MustCompile(`^/api/v1/app/thread/([^/]+)/download-file$`)
	artifactURL    = regexp.MustCompile(`^/api/v1/app/artifact/([^/]+)/content$`)
	downloadTicket = "ticket"
)

// threadFileResource and artifactResource name what a ticket opens.
func threadFileResource(threadID, path string) string { return "thread:" + threadID + ":" + path }
func artifactResource(id string) string               { return "artifact:" + id }

type downloadURLRequest struct {
	URL string `json:"url"`
}

type downloadURLResponse struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// downloadURL is POST /download-url: a short-lived URL for a download
// link. The file is checked as its download checks it (the thread is the
// caller's, the policy allows it, it exists), so a refusal is told here,
// where the page can show it, rather than to the browser's download bar.
func (s *Server) downloadURL(c *fiber.Ctx, req downloadURLRequest) error {
	u, err := url.Parse(req.URL)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return fault.New(fault.Invalid, "url must be a download path of this server, e.g. /api/v1/app/thread/{id}/download-file?path=…")
	}
	ctx, p := c.UserContext(), principal(c)
	var resource string
	switch {
	case threadFileURL.MatchString(u.Path):
		threadID, path := threadFileURL.FindStringSubmatch(u.Path)[1], u.Query().Get("path")
		if path == "" {
			return fault.New(fault.Invalid, "url: path is required")
		}
		ct, err := s.svc.Workspace.DownloadFile(ctx, p, threadID, path)
		if err != nil {
			return err
		}
		ct.Body.Close()
		resource = threadFileResource(threadID, path)
	case artifactURL.MatchString(u.Path):
		id := artifactURL.FindStringSubmatch(u.Path)[1]
		ct, err := s.svc.Workspace.ArtifactContent(ctx, p, id)
		if err != nil {
			return err
		}
		ct.Body.Close()
		resource = artifactResource(id)
	default:
		return fault.New(fault.Invalid, "url must be a thread file's download-file or an artifact's content URL")
	}
	ticket, exp, err := s.svc.Auth.DownloadTicket(p, resource)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set(downloadTicket, ticket)
	u.RawQuery = q.Encode()
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(downloadURLResponse{URL: u.String(), ExpiresAt: exp})
}

// ticketAuth authenticates a download by its URL's ticket, for the file
// the ticket names; without a ticket, by the bearer token as everywhere.
func (s *Server) ticketAuth(resource func(c *fiber.Ctx) string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ticket := c.Query(downloadTicket)
		if ticket == "" {
			return s.authenticate(c)
		}
		p, err := s.svc.Auth.AuthenticateTicket(c.UserContext(), ticket, resource(c))
		if err != nil {
			return err
		}
		c.Locals(principalKey, p)
		return c.Next()
	}
}
