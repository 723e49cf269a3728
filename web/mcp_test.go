package web

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/mcpserver"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

func (m *memAuth) UserByEmail(_ context.Context, email string) (user.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range m.users {
		if u.Email() == email {
			return u, nil
		}
	}
	return user.User{}, fault.New(fault.NotFound, "user not found")
}

// panickyTools panics on every call, as a defect in a tool would.
type panickyTools struct{}

func (panickyTools) Execute(context.Context, messages.ToolCall) (*wire.ToolResult, error) {
	panic("a defect in a tool")
}

// anySandbox opens one container for every call.
type anySandbox struct{}

func (anySandbox) OpenSandbox(context.Context, user.Principal, string) (*turns.Sandbox, error) {
	return &turns.Sandbox{ContainerID: "ctr_1", ScopeID: "default"}, nil
}

// bearer adds a bearer token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// TestMCPToolPanicKeepsServer calls an MCP tool whose code panics: the MCP
// SDK runs tool handlers on goroutines of its own, beyond the HTTP
// server's recovery, so the call must answer an error and the server (and
// the session) stay up, as a panic in a Messages turn fails only the turn.
func TestMCPToolPanicKeepsServer(t *testing.T) {
	ctx := context.Background()
	a := oneMember()
	tok, err := a.CreateAPITokenFor(ctx, "u@acme.test", "mcp", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Services{Auth: a, MCP: mcpserver.New(mcpserver.Deps{Tools: panickyTools{}, Sandboxes: anySandbox{}})}, slog.New(slog.DiscardHandler), Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.app.Listener(ln) }()
	conns := &http.Transport{}
	t.Cleanup(func() {
		conns.CloseIdleConnections()
		_ = srv.Shutdown(ctx)
		<-served
	})

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{tok.Token, conns}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_bash", Arguments: map[string]any{"command": "ls"}})
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("a tool that panicked answered %v, want an internal error", err)
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("the session after a tool panicked: %v", err)
	}
}
