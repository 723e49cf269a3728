package web

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/mcpserver"
	"threadbox/domain/fault"
)

// The MCP endpoint (docs/mcp.md): /mcp serves threadbox's MCP server over
// the streamable HTTP transport of the current protocol revision, and
// /mcp/threads/{id} the same server working in that thread's sandbox.
// Requests are authenticated as the REST APIs' (API tokens and sessions;
// sandbox tokens are refused), and a 401 points at the OAuth protected
// resource metadata, as the MCP authorization specification asks.
const (
	mcpPath = "/mcp"
	// resourceMetadataPath is the protected resource metadata of RFC 9728
	// (at the well-known path, and at its form for the /mcp resource).
	resourceMetadataPath = "/.well-known/oauth-protected-resource"
	// mcpSessionTimeout closes an MCP session no request used for this
	// long.
	mcpSessionTimeout = 30 * time.Minute
)

// newMCPHandler is the streamable HTTP transport of the MCP server: the
// caller the Fiber handler authenticated becomes the token info the SDK
// binds sessions to (a session answers only its own user) and hands to
// the tools.
func newMCPHandler(svc *mcpserver.Service, s *Server) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return svc.Server() }, &mcp.StreamableHTTPOptions{
		SessionTimeout: mcpSessionTimeout,
		Logger:         s.log.With("component", "mcp"),
	})
	verify := func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, ok := r.Context().Value(mcpCallerKey{}).(mcpserver.Caller)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return mcpserver.TokenInfo(c, time.Time{}), nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// mcpCallerKey keys the authenticated caller in the bridged request's
// context.
type mcpCallerKey struct{}

// mcpAuthenticate is authenticate for the MCP endpoint: a request it
// refuses as unauthenticated is told where the protected resource
// metadata is (WWW-Authenticate: Bearer resource_metadata=...).
func (s *Server) mcpAuthenticate(c *fiber.Ctx) error {
	err := s.authenticate(c)
	if fault.Is(err, fault.Unauthenticated) {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer resource_metadata="`+baseURL(c)+resourceMetadataPath+mcpPath+`"`)
	}
	return err
}

// baseURL is the server's address as the client reached it.
func baseURL(c *fiber.Ctx) string { return c.Protocol() + "://" + c.Hostname() }

// resourceMetadata is GET /.well-known/oauth-protected-resource[/mcp]:
// the MCP endpoint as an OAuth protected resource. threadbox issues its
// own bearer tokens (API tokens, sessions), so it names no authorization
// server: a client is configured with a token.
func (s *Server) resourceMetadata(c *fiber.Ctx) error {
	if s.svc.MCP == nil {
		return fault.New(fault.NotFound, "no MCP endpoint on this server")
	}
	base := baseURL(c)
	c.Set(fiber.HeaderAccessControlAllowOrigin, "*")
	return c.JSON(fiber.Map{
		"resource":                 base + mcpPath,
		"authorization_servers":    []string{},
		"bearer_methods_supported": []string{"header"},
		"scopes_supported":         []string{},
		"resource_name":            "threadbox MCP server",
		"resource_documentation":   base + "/api/openapi.json",
	})
}

// serveMCP is /mcp and /mcp/threads/{id}: the request, authenticated,
// goes to the MCP transport with its caller; a thread in the URL must be
// one the caller may use.
func (s *Server) serveMCP(c *fiber.Ctx) error {
	if s.mcp == nil {
		return fault.New(fault.NotFound, "no MCP endpoint on this server")
	}
	p := principal(c)
	scope := c.Params("id")
	if scope != "" {
		if s.svc.Workspace == nil {
			return fault.New(fault.Unavailable, "threads are not configured on this server")
		}
		if _, err := s.svc.Workspace.Thread(c.UserContext(), p, scope); err != nil {
			return err
		}
	}
	b, err := body(c, maxJSONBody)
	if err != nil {
		return err
	}
	ctx := context.WithValue(context.Background(), mcpCallerKey{}, mcpserver.Caller{Principal: p, Scope: scope})
	r, err := http.NewRequestWithContext(ctx, c.Method(), c.OriginalURL(), bytes.NewReader(b))
	if err != nil {
		return fault.Wrap(fault.Invalid, "invalid request", err)
	}
	c.Request().Header.VisitAll(func(k, v []byte) { r.Header.Add(string(k), string(v)) })
	// authenticate took the token from X-Api-Key as well; the transport
	// reads only Authorization.
	if _, ok := bearerToken(r.Header.Get("Authorization")); !ok {
		r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(c.Get("X-Api-Key")))
	}
	r.Host = c.Hostname()
	r.RemoteAddr = c.Context().RemoteAddr().String()
	r.ContentLength = int64(len(b))
	if err := s.serveStreaming(c, s.mcp, r); err != nil {
		return err
	}
	return transportError(c)
}

// transportError turns a plain-text error answer of the MCP transport (a
// missing Accept type, an unknown session, another user's session) into
// the API's error envelope with the same status and message.
func transportError(c *fiber.Ctx) error {
	resp := c.Response()
	st := resp.StatusCode()
	if st < http.StatusBadRequest || resp.IsBodyStream() || !strings.HasPrefix(string(resp.Header.ContentType()), fiber.MIMETextPlain) {
		return nil
	}
	msg := strings.TrimSpace(string(resp.Body()))
	resp.ResetBody()
	return fiber.NewError(st, msg)
}
