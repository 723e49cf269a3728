// Package web is threadbox's HTTP edge: Fiber handlers that parse requests,
// call the app use cases and map results and errors to responses.
package web

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/admin"
	"threadbox/app/auth"
	"threadbox/app/backends"
	"threadbox/app/batches"
	"threadbox/app/credentials"
	"threadbox/app/files"
	"threadbox/app/mcpserver"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/skills"
	"threadbox/app/turns"
	"threadbox/app/usage"
	"threadbox/app/workspace"
)

// Services are the use cases the handlers call.
type Services struct {
	Auth      *auth.Service
	Admin     *admin.Service
	Workspace *workspace.Service
	Files     *files.Service
	// Backends is the sandbox capability matrix; nil lists no backends.
	Backends *backends.Service
	// Turns is the front door of Messages API requests and chat turns;
	// nil answers the Messages API with 503.
	Turns *turns.Service
	// Skills keeps the org's skills.
	Skills *skills.Service
	// Batches runs Message Batches; nil answers them with 503.
	Batches *batches.Service
	// Counter counts the tokens of a count_tokens request; nil answers
	// 503.
	Counter TokenCounter
	// Ready reports whether the database answers and is migrated.
	Ready func(ctx context.Context) error
	// BlobsReady reports whether the artifact store answers; nil checks
	// nothing.
	BlobsReady func(ctx context.Context) error
	// Usage reports the org's metered usage; nil answers 503.
	Usage *usage.Service
	// Credentials signs generated media on download; nil serves every
	// download as written.
	Credentials *credentials.Service
	// MCP is the MCP server served at /mcp; nil serves none.
	MCP *mcpserver.Service
}

// TokenCounter counts a count_tokens request's input tokens
// (app/messages).
type TokenCounter interface {
	CountTokens(ctx context.Context, req *wire.Request, opts messages.CountOptions) (messages.TokenCount, error)
}

// Options tune the HTTP server.
type Options struct {
	// BodyLimit caps request bodies that are read whole (JSON).
	BodyLimit int
	// Classifiers map errors of packages that do not use fault.
	Classifiers []Classifier
	// MaxUploadBytes caps streamed uploads (Files API); the org policy's
	// cap applies too. Zero means DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (login throttling counts per client address).
	TrustedProxies []netip.Prefix
	// Observer, when set, is told of every request (metrics).
	Observer RequestObserver
	// Metrics, when set with MetricsToken, is served at GET /metrics to
	// a scraper presenting the token as a bearer token.
	Metrics      http.Handler
	MetricsToken string
}

// RequestObserver is told of each request: its route pattern (bounded),
// method, status, duration, and the body bytes its request and response
// declared (negative when unknown) (infra/metrics).
type RequestObserver interface {
	ObserveRequest(route, method string, status int, d time.Duration, in, out int64)
}

// Server is the HTTP edge.
type Server struct {
	svc         Services
	log         *slog.Logger
	app         *fiber.App
	classifiers []Classifier
	maxUpload   int64
	opt         Options
	started     time.Time // shown as the models' created_at
	trusted     []netip.Prefix
	// mcp is the MCP endpoint's transport (nil without Services.MCP).
	mcp http.Handler
	// stopping ends when Shutdown starts: streamed net/http handlers
	// (serveStreaming) end with it.
	stopping context.Context
	stop     context.CancelFunc
	// keepAlive is how often an idle streamed event stream gets a
	// comment (keepAliveEvery).
	keepAlive time.Duration
	// turnRunner runs streamed turns (turnstream.go).
	turnRunner *turnRunner
}

// New builds the Fiber app with every route.
func New(svc Services, log *slog.Logger, opt Options) *Server {
	if opt.BodyLimit <= 0 {
		opt.BodyLimit = 32 << 20
	}
	if opt.MaxUploadBytes <= 0 {
		opt.MaxUploadBytes = DefaultMaxUploadBytes
	}
	s := &Server{svc: svc, log: log, classifiers: opt.Classifiers, maxUpload: opt.MaxUploadBytes, trusted: opt.TrustedProxies, opt: opt, started: time.Now().UTC().Truncate(time.Second)}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.turnRunner = newTurnRunner()
	s.keepAlive = keepAliveEvery
	if svc.MCP != nil {
		s.mcp = newMCPHandler(svc.MCP, s)
	}
	s.app = fiber.New(fiber.Config{
		AppName:               "threadbox",
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		// Every string a handler reads from the request is its own copy:
		// fasthttp reuses request buffers once a handler returns, and a
		// value kept longer (a cache key, a goroutine's argument) would
		// change under it.
		Immutable:         true,
		BodyLimit:         opt.BodyLimit,
		ReadBufferSize:    16 << 10, // bounds header size: larger headers get 431
		ReadTimeout:       5 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		StreamRequestBody: true,
		// Multipart bodies are read as streams by the handlers, never
		// pre-parsed into memory or temporary files.
		DisablePreParseMultipartForm: true,
	})
	s.routes()
	srv := s.app.Server()
	srv.Handler = guardRequests(srv.Handler, s.app.Config().RequestMethods)
	return s
}

// App returns the Fiber app, for tests and for serving.
func (s *Server) App() *fiber.App { return s.app }

// Listen serves on addr until Shutdown; connections close with a linger
// (linger.go).
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("web: listen: %w", err)
	}
	return s.app.Listener(lingerListener{ln})
}

// Shutdown stops accepting requests and waits up to the context's deadline
// for in-flight ones.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	return s.app.ShutdownWithContext(ctx)
}
