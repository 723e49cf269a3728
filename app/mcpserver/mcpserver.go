// Package mcpserver serves threadbox's tool kit to Model Context Protocol
// clients: an agent that speaks MCP (Claude Code, Claude Desktop, any
// client of an MCP SDK) runs code in a sandbox of threadbox as a model of
// the Messages API would. The tools are those of the one tool kit
// (app/tools), under the names and input schemas the Messages API gives
// the model, and answer the same result content; the file tools go
// through the Files API's use cases (app/files); the container of each
// call is resolved, checked against the quotas and touched by the front
// door of turns (app/turns.OpenSandbox), and the org's codeExecution
// feature gates the code tools as it gates them in chat turns. The HTTP
// transport (the streamable HTTP handler, authentication) lives in web/.
//
// A session works in one container: the caller's default container, the
// thread the URL names (/mcp/threads/{id}), or the one the use_sandbox
// tool chose for the session. Each request is authenticated by the web
// layer, which passes its principal in the request's token info (Caller).
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// Sandboxes opens the container of a call (app/turns.Service).
type Sandboxes interface {
	// OpenSandbox resolves, checks and touches the container scopeID
	// names ("" the caller's default one) for direct tool calls.
	OpenSandbox(ctx context.Context, p user.Principal, scopeID string) (*turns.Sandbox, error)
}

// Files are the Files API's use cases over a container's files
// (app/files.Service).
type Files interface {
	List(ctx context.Context, p user.Principal, scopeID string, lp files.ListParams) (files.Page, error)
	OpenPath(ctx context.Context, p user.Principal, scopeID, sandboxPath string) (files.Content, error)
	Put(ctx context.Context, p user.Principal, scopeID, key string, body io.Reader, limit int64) (files.File, error)
	Delete(ctx context.Context, p user.Principal, scopeID, fileID string) (string, error)
}

// Threads lists and finds the caller's threads (app/workspace.Service).
type Threads interface {
	Threads(ctx context.Context, p user.Principal, projectID string, page thread.Page) ([]thread.Thread, error)
	Thread(ctx context.Context, p user.Principal, threadID string) (thread.Thread, error)
}

// Policies gives an org's feature policy (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Deps are the ports of the server. Tools and Sandboxes are required;
// without Files the file tools and resources answer that they are not
// configured, without Threads no thread can be listed, without Policies
// every feature is taken as allowed.
type Deps struct {
	// Tools is the tool kit the Messages API runs its server tools with
	// (app/tools.Executor, as wired: metered, measured).
	Tools     messages.ToolExecutor
	Sandboxes Sandboxes
	Files     Files
	Threads   Threads
	Policies  Policies
	// MaxReadBytes caps what read_file and a resource read return
	// (DefaultMaxReadBytes).
	MaxReadBytes int64
	// Version is reported to clients as the server's version.
	Version string
	Log     *slog.Logger
}

// DefaultMaxReadBytes is the largest file read_file returns whole.
const DefaultMaxReadBytes = 8 << 20

// Service is threadbox's MCP server: one mcp.Server whose tools act for
// the caller of each request.
type Service struct {
	d   Deps
	log *slog.Logger
	srv *mcp.Server
	// chosen holds the container each session chose with use_sandbox, by
	// session id.
	mu     sync.Mutex
	chosen map[string]string
}

// New returns the MCP server over d.
func New(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.MaxReadBytes <= 0 {
		d.MaxReadBytes = DefaultMaxReadBytes
	}
	if d.Version == "" {
		d.Version = "dev"
	}
	s := &Service{d: d, log: d.Log, chosen: map[string]string{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "threadbox", Title: "threadbox sandboxes", Version: d.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       d.Log,
		Capabilities: &mcp.ServerCapabilities{},
	})
	s.addTools()
	s.addResources()
	s.srv.AddReceivingMiddleware(s.recoverPanics)
	return s
}

// recoverPanics answers a request whose handler panicked with an error
// and logs the panic. The SDK runs handlers on goroutines of its own, out
// of reach of the HTTP server's recovery: a panic there (in a tool of the
// kit, say) would end the whole process.
func (s *Service) recoverPanics(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer func() {
			if r := recover(); r != nil {
				eid := id.New("err")
				s.log.Error("panic in an MCP request", "method", method, "error_id", eid, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				res, err = nil, fmt.Errorf("internal error (error id %s; the server's log has the cause)", eid)
			}
		}()
		return next(ctx, method, req)
	}
}

// instructions tell the client's model what the server is.
const instructions = "threadbox runs your commands in a durable, isolated sandbox (one container: a thread's, or the " +
	"caller's default one). Files persist in /home/agent/workspace (scratch), /mnt/user-data/uploads (read-only " +
	"inputs) and /mnt/user-data/outputs (deliverables, returned as resource links). Use list_threads and " +
	"use_sandbox to work in another thread's sandbox."

// Server returns the MCP server the transport serves.
func (s *Service) Server() *mcp.Server { return s.srv }

// Caller is who sends a request and which container its URL names: the
// web layer sets it on every HTTP request (TokenInfo), after
// authenticating the request as the REST APIs do.
type Caller struct {
	Principal user.Principal
	// Scope is the container the URL names (a thread id), "" for the
	// caller's default container.
	Scope string
}

// callerKey keys the Caller in the token info's Extra.
const callerKey = "threadbox.caller"

// TokenInfo is the token info the web layer gives the MCP transport for
// a request of c: the user id binds the session to its user (the SDK
// refuses another user's requests in it), and the caller rides along to
// the tools.
func TokenInfo(c Caller, expires time.Time) *auth.TokenInfo {
	return &auth.TokenInfo{UserID: c.Principal.OrgID + "/" + c.Principal.UserID, Expiration: expires, Extra: map[string]any{callerKey: c}}
}

// callerOf returns the caller of a request; ok false when the transport
// gave none (a server not behind the web layer's authentication).
func callerOf(extra *mcp.RequestExtra) (Caller, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return Caller{}, false
	}
	c, ok := extra.TokenInfo.Extra[callerKey].(Caller)
	return c, ok && c.Principal.UserID != ""
}

// errNoCaller answers a request that reached the server unauthenticated.
var errNoCaller = errors.New("mcpserver: the request carries no authenticated caller")

// scopeOf is the container a session works in: the one use_sandbox chose,
// else the one the URL names, else the caller's default ("").
func (s *Service) scopeOf(ss *mcp.ServerSession, c Caller) string {
	if ss != nil {
		s.mu.Lock()
		chosen, ok := s.chosen[ss.ID()]
		s.mu.Unlock()
		if ok {
			return chosen
		}
	}
	return c.Scope
}

// maxChosen bounds the sessions whose choice is kept; past it the choices
// of sessions that ended are dropped.
const maxChosen = 4096

// choose records the container a session works in from now on.
func (s *Service) choose(ss *mcp.ServerSession, scope string) {
	if ss == nil || ss.ID() == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.chosen) >= maxChosen {
		live := map[string]bool{}
		for ls := range s.srv.Sessions() {
			live[ls.ID()] = true
		}
		maps.DeleteFunc(s.chosen, func(k, _ string) bool { return !live[k] })
	}
	s.chosen[ss.ID()] = scope
}

// allows reports whether the caller's org allows feature f; a refusal is
// the policy's error.
func (s *Service) allows(ctx context.Context, p user.Principal, f org.Feature) error {
	if s.d.Policies == nil {
		return nil
	}
	pol, err := s.d.Policies.OrgPolicy(ctx, p.OrgID)
	if err != nil {
		return fmt.Errorf("mcpserver: policy: %w", err)
	}
	if !pol.Allows(f) {
		return org.Refusal(f)
	}
	return nil
}

// explain is the text a tool answers for err: the message of an error the
// client may see, or an error id whose cause goes to the log (as the tool
// kit's own results explain theirs).
func (s *Service) explain(err error) string { return messages.Explain(s.log, err) }

// failed is a tool's error result for err.
func (s *Service) failed(err error) *mcp.CallToolResult { return errorResult(s.explain(err)) }

// errorResult is a tool's answer when it could not run.
func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// jsonResult answers v as the call's text content and structured content.
func jsonResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: encode result: %w", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil
}

// resultOf turns a tool kit result into the call's result: its content
// object as the Messages API sends it, as text and as structured content,
// with a resource link to each output file it names.
func resultOf(r *wire.ToolResult, links []*mcp.ResourceLink) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: encode result: %w", err)
	}
	out := &mcp.CallToolResult{IsError: r.IsError(), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}
	for _, l := range links {
		out.Content = append(out.Content, l)
	}
	return out, nil
}
