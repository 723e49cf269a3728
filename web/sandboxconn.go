package web

import (
	"bytes"
	"net"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// sandboxAPIPrefix is the only path prefix served to connections made from
// inside a sandbox.
const sandboxAPIPrefix = "/api/gpt/"

// sandboxConn is a connection made from inside a container's sandbox to
// the product's API (app/bridge.Bridge).
type sandboxConn struct {
	net.Conn
	containerID string
}

// Write fails once the sandbox has accepted nothing for writeStall, as on
// the public listener (linger.go): code that stops reading a streamed
// answer does not hold its turn for ever.
func (c *sandboxConn) Write(p []byte) (int, error) {
	return writeProgressing(c.Conn, p, writeStall)
}

// ServeSandboxConn serves one connection from inside the container's
// sandbox: only the product's API (/api/gpt/), only with a sandbox token
// issued for that container. It returns when the connection is done.
func (s *Server) ServeSandboxConn(conn net.Conn, containerID string) {
	_ = s.sandboxServer().ServeConn(&sandboxConn{Conn: conn, containerID: containerID})
}

// sandboxServer returns an HTTP server for sandbox connections: the app's
// handler behind a path filter, with the app's limits.
func (s *Server) sandboxServer() *fasthttp.Server {
	base := s.app.Server()
	h := base.Handler // the app's handler behind guardRequests
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			// Both the normalised path and the path as sent, which Fiber
			// routes by: "/api/v1/app/x/..%2F..%2F..%2Fgpt%2F" is normalised
			// into /api/gpt/ but routed outside it.
			if !bytes.HasPrefix(ctx.Path(), []byte(sandboxAPIPrefix)) || !bytes.HasPrefix(ctx.URI().PathOriginal(), []byte(sandboxAPIPrefix)) {
				// Its body is not read: the connection ends with the
				// answer, so that it cannot be taken for a request.
				ctx.SetConnectionClose()
				ctx.SetStatusCode(fiber.StatusNotFound)
				ctx.SetContentType(fiber.MIMEApplicationJSON)
				ctx.SetBodyString(`{"type":"error","error":{"type":"not_found_error","message":"Only the product's API (/api/gpt/) is served inside the sandbox."}}`)
				return
			}
			h(ctx)
		},
		Name:                         "threadbox",
		ReadBufferSize:               base.ReadBufferSize,
		MaxRequestBodySize:           base.MaxRequestBodySize,
		StreamRequestBody:            base.StreamRequestBody,
		DisablePreParseMultipartForm: base.DisablePreParseMultipartForm,
		ReadTimeout:                  base.ReadTimeout,
		IdleTimeout:                  base.IdleTimeout,
	}
}

// checkSandboxConn refuses, on a connection from inside a sandbox, any
// token but a sandbox token issued for that sandbox's container, and a
// sandbox token anywhere else: one that leaked (printed into an output
// file, say) is of no use outside.
func checkSandboxConn(c *fiber.Ctx, p user.Principal) error {
	sc, inside := c.Context().Conn().(*sandboxConn)
	switch {
	case !inside && p.Kind == user.SandboxToken:
		return fault.New(fault.Forbidden, "sandbox tokens are valid only from inside their sandbox")
	case inside && (p.Kind != user.SandboxToken || p.ContainerID != sc.containerID):
		return fault.New(fault.Forbidden, "this token is not valid from this sandbox")
	}
	return nil
}
