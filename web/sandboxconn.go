package web

import (
	"bytes"
	"context"
	"net"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"threadbox/app/messages"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// sandboxAPIPrefix is the only path prefix served to connections made from
// inside a sandbox.
const sandboxAPIPrefix = "/api/gpt/"

// sandboxConn is a connection made from inside a container's sandbox to
// the product's API (app/sandboxtools.Bridge).
type sandboxConn struct {
	net.Conn
	containerID string
}

// SandboxEnv gives a turn the variables its sandbox commands get
// (app/sandboxtools.TurnEnv).
type SandboxEnv interface {
	// Begin returns env, which issues the turn's short-lived token at its
	// first call and returns the variables, and end, which revokes the
	// token (if issued) when the turn is over.
	Begin(p user.Principal, containerID, model string) (env func(context.Context) ([]string, error), end func())
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
	h := s.app.Handler()
	base := s.app.Server()
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !bytes.HasPrefix(ctx.Path(), []byte(sandboxAPIPrefix)) {
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

// beginSandboxTurn gives opts the turn's sandbox variables when the turn
// can run commands (it has a container and server tools may be among its
// tools); the returned function ends them (revokes the token).
func (m *MessagesAPI) beginSandboxTurn(p user.Principal, req *messages.Request, opts *messages.RunOptions) func() {
	if m.SandboxEnv == nil || opts.ContainerID == "" || len(req.Tools) == 0 {
		return func() {}
	}
	env, end := m.SandboxEnv.Begin(p, opts.ContainerID, req.Model)
	opts.EnvFunc = env
	return end
}
