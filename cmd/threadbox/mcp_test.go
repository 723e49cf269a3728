package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	msgwire "threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

// bearerTransport adds a bearer token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// progressLog keeps the progress notifications a client received.
type progressLog struct {
	mu   sync.Mutex
	got  []*mcp.ProgressNotificationParams
	seen chan string // each notification's message, as it arrives
}

func (p *progressLog) add(n *mcp.ProgressNotificationParams) {
	p.mu.Lock()
	p.got = append(p.got, n)
	p.mu.Unlock()
	select {
	case p.seen <- n.Message:
	default:
	}
}

func (p *progressLog) of(token string) []*mcp.ProgressNotificationParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*mcp.ProgressNotificationParams
	for _, n := range p.got {
		if n.ProgressToken == token {
			out = append(out, n)
		}
	}
	return out
}

// mcpSession connects the official Go SDK's client to threadbox's MCP
// endpoint at path with token; the session closes when the test ends.
func mcpSession(t *testing.T, s *server, path, token string) (*mcp.ClientSession, *progressLog) {
	t.Helper()
	pl := &progressLog{seen: make(chan string, 64)}
	client := mcp.NewClient(&mcp.Implementation{Name: "threadbox-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { pl.add(req.Params) },
	})
	// Its own connections, closed with the session: a connection its
	// transport dialled for a request it then gave up (a stream it
	// stopped) carries no request, and the server's shutdown would wait
	// for it.
	conns := &http.Transport{}
	tr := &mcp.StreamableClientTransport{Endpoint: s.base + path, HTTPClient: &http.Client{Transport: bearerTransport{token, conns}}}
	cs, err := client.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		conns.CloseIdleConnections()
	})
	return cs, pl
}

// callTool calls a tool and returns its result, failing on a protocol error.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// text is the first text content of a result.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	t.Fatalf("no text content in %+v", res.Content)
	return ""
}

// object is a result's content object (its structured content).
func object(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(text(t, res)), &m); err != nil {
		t.Fatalf("result is not a JSON object: %s", text(t, res))
	}
	b, _ := json.Marshal(res.StructuredContent)
	var sc map[string]any
	if err := json.Unmarshal(b, &sc); err != nil || !jsonEqual(m, sc) {
		t.Fatalf("structured content %s differs from the text %s", b, text(t, res))
	}
	return m
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// links are a result's resource links.
func links(res *mcp.CallToolResult) []*mcp.ResourceLink {
	var out []*mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			out = append(out, l)
		}
	}
	return out
}

// mustOK fails unless the call succeeded.
func mustOK(t *testing.T, name string, res *mcp.CallToolResult) {
	t.Helper()
	if res.IsError {
		t.Fatalf("%s failed: %s", name, text(t, res))
	}
}

// TestMCPServerTools runs every tool of the MCP endpoint with the official
// Go SDK's client against Docker sandboxes: each tool's input schema is a
// valid JSON schema and input that breaks it is refused; the tool kit's
// tools answer the Messages API's result content (bash with an output file
// as a resource link the client reads; the text editor; the Python cell,
// whose variables persist; every sandbox_v1 tool); the file tools list,
// write, read and delete through the Files API's rules, and the container's
// files are resources; list_threads and use_sandbox move the session to a
// thread, whose files the Files API then lists.
func TestMCPServerTools(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	cs, _ := mcpSession(t, s, "/mcp", f.admin)

	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
		b, _ := json.Marshal(tool.InputSchema)
		var sch jsonschema.Schema
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatalf("%s: schema %s: %v", tool.Name, b, err)
		}
		if _, err := sch.Resolve(nil); err != nil || sch.Type != "object" || tool.Description == "" {
			t.Errorf("%s: schema %s (resolve: %v), description %q", tool.Name, b, err, tool.Description)
		}
	}
	want := []string{"bash_code_execution", "text_editor_code_execution", "code_execution", "sandbox_bash", "repl_execute",
		"exec_command", "write_stdin", "edit_file", "bsl_check", "list_files", "read_file", "write_file", "delete_file", "list_threads", "use_sandbox"}
	slices.Sort(want)
	if slices.Sort(names); !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	t.Run("input that breaks the schema is refused", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{"sandbox_bash", map[string]any{}},
			{"sandbox_bash", map[string]any{"command": 42}},
			{"text_editor_code_execution", map[string]any{"command": "delete", "path": "a"}},
			{"sandbox_bash", map[string]any{"command": "true", "timeout_seconds": 0}},
			{"read_file", map[string]any{"path": "a", "extra": true}},
		} {
			res := callTool(t, cs, tc.tool, tc.args)
			if !res.IsError || !strings.Contains(text(t, res), "Invalid input") {
				t.Errorf("%s %v: %+v %s", tc.tool, tc.args, res.IsError, text(t, res))
			}
		}
	})

	t.Run("bash with an output file", func(t *testing.T) {
		res := callTool(t, cs, "bash_code_execution", map[string]any{"command": "echo hello; printf 'a,b\\n1,2\\n' > $OUTPUT_DIR/report.csv"})
		mustOK(t, "bash", res)
		o := object(t, res)
		if o["type"] != "bash_code_execution_result" || o["stdout"] != "hello\n" || o["return_code"] != float64(0) {
			t.Fatalf("bash result %v", o)
		}
		ls := links(res)
		if len(ls) != 1 || ls[0].URI != "sandbox:///default/mnt/user-data/outputs/report.csv" || ls[0].Name != "report.csv" {
			t.Fatalf("links %+v", ls)
		}
		rr, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: ls[0].URI})
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "a,b\n1,2\n" {
			t.Fatalf("read %s: %v %+v", ls[0].URI, err, rr)
		}
		failed := object(t, callTool(t, cs, "bash_code_execution", map[string]any{"command": "exit 3"}))
		if failed["return_code"] != float64(3) {
			t.Fatalf("exit 3: %v", failed)
		}
	})

	t.Run("text editor", func(t *testing.T) {
		mustOK(t, "create", callTool(t, cs, "text_editor_code_execution", map[string]any{"command": "create", "path": "notes.md", "file_text": "one\ntwo\n"}))
		o := object(t, callTool(t, cs, "text_editor_code_execution", map[string]any{"command": "view", "path": "/home/agent/workspace/notes.md"}))
		if o["type"] != "text_editor_code_execution_view_result" || !strings.Contains(o["content"].(string), "two") {
			t.Fatalf("view %v", o)
		}
		res := callTool(t, cs, "text_editor_code_execution", map[string]any{"command": "view", "path": "/etc/passwd"})
		if !res.IsError || object(t, res)["type"] != "text_editor_code_execution_tool_result_error" {
			t.Fatalf("outside the mounts: %s", text(t, res))
		}
	})

	t.Run("python cell keeps its variables", func(t *testing.T) {
		mustOK(t, "cell", callTool(t, cs, "code_execution", map[string]any{"code": "x = 41"}))
		o := object(t, callTool(t, cs, "code_execution", map[string]any{"code": "print(x + 1)"}))
		if o["type"] != "code_execution_result" || o["stdout"] != "42\n" {
			t.Fatalf("second cell %v", o)
		}
	})

	t.Run("sandbox_v1 tools", func(t *testing.T) {
		o := object(t, callTool(t, cs, "sandbox_bash", map[string]any{"command": "echo data > made.txt && cat made.txt", "description": "make a file"}))
		if o["type"] != "sandbox_bash_result" || o["stdout"] != "data\n" {
			t.Fatalf("sandbox_bash %v", o)
		}
		mustOK(t, "repl", callTool(t, cs, "repl_execute", map[string]any{"code": "y = 6 * 7"}))
		o = object(t, callTool(t, cs, "repl_execute", map[string]any{"code": "y"}))
		if o["type"] != "repl_execute_result" || o["value"] != "42" {
			t.Fatalf("repl %v", o)
		}
		o = object(t, callTool(t, cs, "exec_command", map[string]any{"command": "cat", "grace_seconds": 1}))
		sid, _ := o["session_id"].(string)
		if o["type"] != "exec_command_result" || sid == "" || o["status"] != "running" {
			t.Fatalf("exec_command %v", o)
		}
		o = object(t, callTool(t, cs, "write_stdin", map[string]any{"session_id": sid, "input": "ping\n", "wait_seconds": 5}))
		if o["type"] != "write_stdin_result" || !strings.Contains(o["stdout"].(string), "ping") {
			t.Fatalf("write_stdin %v", o)
		}
		object(t, callTool(t, cs, "write_stdin", map[string]any{"session_id": sid, "input": "\u0004", "wait_seconds": 5}))
		// Outputs a tool made without naming them in its result come back
		// as resource links too.
		linked := func(res *mcp.CallToolResult, p string) bool {
			for _, l := range links(res) {
				if strings.HasSuffix(l.URI, p) {
					return true
				}
			}
			return false
		}
		if res := callTool(t, cs, "exec_command", map[string]any{"command": "echo hi > /mnt/user-data/outputs/from-exec.txt", "grace_seconds": 5}); res.IsError || !linked(res, "/mnt/user-data/outputs/from-exec.txt") {
			t.Fatalf("exec_command's output not linked: %s", text(t, res))
		}
		if res := callTool(t, cs, "repl_execute", map[string]any{"code": "open('/mnt/user-data/outputs/from-repl.txt', 'w').write('x')"}); res.IsError || !linked(res, "/mnt/user-data/outputs/from-repl.txt") {
			t.Fatalf("repl_execute's output not linked: %s", text(t, res))
		}
		o = object(t, callTool(t, cs, "edit_file", map[string]any{"path": "made.txt", "old_str": "data", "new_str": "edited"}))
		if o["type"] != "edit_file_result" || o["match"] != "exact" {
			t.Fatalf("edit_file %v", o)
		}
		res := callTool(t, cs, "bsl_check", map[string]any{"path": "made.txt"})
		if !res.IsError || !strings.Contains(text(t, res), "bsl-language-server is not installed") {
			t.Fatalf("bsl_check %s", text(t, res))
		}
	})

	t.Run("file tools and resources", func(t *testing.T) {
		w := object(t, callTool(t, cs, "write_file", map[string]any{"path": "/mnt/user-data/outputs/summary.txt", "content": "all good"}))
		if w["path"] != "/mnt/user-data/outputs/summary.txt" || w["size_bytes"] != float64(8) {
			t.Fatalf("write_file %v", w)
		}
		if r := callTool(t, cs, "read_file", map[string]any{"path": "/mnt/user-data/outputs/summary.txt"}); text(t, r) != "all good" {
			t.Fatalf("read_file %s", text(t, r))
		}
		if r := callTool(t, cs, "read_file", map[string]any{"path": "made.txt"}); text(t, r) != "edited\n" {
			t.Fatalf("read_file of a workspace file %s", text(t, r))
		}
		listed := func() []string {
			var keys []string
			for _, x := range object(t, callTool(t, cs, "list_files", map[string]any{}))["data"].([]any) {
				keys = append(keys, x.(map[string]any)["path"].(string))
			}
			return keys
		}
		if got := listed(); !slices.Contains(got, "/mnt/user-data/outputs/summary.txt") || !slices.Contains(got, "/mnt/user-data/outputs/report.csv") {
			t.Fatalf("list_files %v", got)
		}
		rl, err := cs.ListResources(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(rl.Resources, func(r *mcp.Resource) bool {
			return r.URI == "sandbox:///default/mnt/user-data/outputs/summary.txt"
		}) {
			t.Fatalf("resources %+v", rl.Resources)
		}
		mustOK(t, "delete_file", callTool(t, cs, "delete_file", map[string]any{"path": "/mnt/user-data/outputs/summary.txt"}))
		if got := listed(); slices.Contains(got, "/mnt/user-data/outputs/summary.txt") {
			t.Fatalf("deleted file still listed: %v", got)
		}
		if r := callTool(t, cs, "read_file", map[string]any{"path": "/mnt/user-data/outputs/summary.txt"}); !r.IsError {
			t.Fatalf("read of a deleted file: %s", text(t, r))
		}
		if r := callTool(t, cs, "write_file", map[string]any{"path": "/home/agent/workspace/x", "content": "x"}); !r.IsError || !strings.Contains(text(t, r), "text_editor_code_execution") {
			t.Fatalf("write_file to the workspace: %s", text(t, r))
		}
		if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "sandbox:///default/mnt/user-data/outputs/none.txt"}); err == nil {
			t.Fatal("a missing resource was read")
		}
	})

	t.Run("a thread's sandbox", func(t *testing.T) {
		th := object(t, callTool(t, cs, "list_threads", map[string]any{}))
		if d := th["data"].([]any); len(d) != 1 || d[0].(map[string]any)["id"] != f.tid || th["current_sandbox"] != "default" {
			t.Fatalf("list_threads %v", th)
		}
		mustOK(t, "use_sandbox", callTool(t, cs, "use_sandbox", map[string]any{"thread_id": f.tid}))
		res := callTool(t, cs, "bash_code_execution", map[string]any{"command": "echo from mcp > $OUTPUT_DIR/thread-note.txt"})
		mustOK(t, "bash", res)
		if ls := links(res); len(ls) != 1 || ls[0].URI != "sandbox:///"+f.tid+"/mnt/user-data/outputs/thread-note.txt" {
			t.Fatalf("links %+v", ls)
		}
		r := s.do("GET", "/api/gpt/v1/files?scope_id="+f.tid, f.admin, nil)
		if r.status != 200 || !strings.Contains(string(r.body), `"filename":"thread-note.txt"`) {
			t.Fatalf("files of the thread: %d %s", r.status, r.body)
		}
		// The URL names the thread as well.
		ts, _ := mcpSession(t, s, "/mcp/threads/"+f.tid, f.admin)
		if r := callTool(t, ts, "read_file", map[string]any{"path": "/mnt/user-data/outputs/thread-note.txt"}); text(t, r) != "from mcp\n" {
			t.Fatalf("read in /mcp/threads: %s", text(t, r))
		}
	})

	t.Run("another user's thread is refused", func(t *testing.T) {
		ms, _ := mcpSession(t, s, "/mcp", f.member)
		res := callTool(t, ms, "use_sandbox", map[string]any{"thread_id": f.tid})
		if !res.IsError {
			t.Fatalf("use_sandbox of another user's thread: %s", text(t, res))
		}
		if _, err := ms.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "sandbox:///" + f.tid + "/mnt/user-data/outputs/thread-note.txt"}); err == nil {
			t.Fatal("another user's thread file was read")
		}
		// The member's own default container has none of the admin's files.
		if r := callTool(t, ms, "read_file", map[string]any{"path": "/mnt/user-data/outputs/report.csv"}); !r.IsError {
			t.Fatalf("member read the admin's file: %s", text(t, r))
		}
		for _, tok := range []string{f.member, f.out} {
			r := s.do("POST", "/mcp/threads/"+f.tid, tok, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"}, "Accept", "application/json, text/event-stream")
			if r.status != 404 {
				t.Fatalf("/mcp/threads of another user's thread: %d %s", r.status, r.body)
			}
		}
	})
}

// TestMCPProgressAndCancel: a long command streams its output as progress
// notifications of the call's progress token and is metered in the org's
// usage, and a call the client cancels ends its command in the sandbox.
func TestMCPProgressAndCancel(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	tok := s.bootstrap("acme", "admin@acme.test")
	cs, pl := mcpSession(t, s, "/mcp", tok)

	p := &mcp.CallToolParams{Name: "bash_code_execution", Arguments: map[string]any{"command": "for i in 1 2 3; do echo line$i; sleep 0.2; done"}}
	p.SetProgressToken("run-1")
	res, err := cs.CallTool(context.Background(), p)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	got := pl.of("run-1")
	var msgs strings.Builder
	last := 0.0
	for _, n := range got {
		if n.Progress <= last {
			t.Fatalf("progress does not grow: %v after %v", n.Progress, last)
		}
		last = n.Progress
		msgs.WriteString(n.Message)
	}
	if msgs.String() != "line1\nline2\nline3\n" {
		t.Fatalf("progress messages %q (%d notifications)", msgs.String(), len(got))
	}
	// The call is metered as a command of any turn.
	today := time.Now().UTC().Format("2006-01-02")
	r := s.do("GET", appAPI+"/org/usage?from="+today+"&to="+today+"&group_by=user", tok, nil)
	if data, _ := r.json(t)["data"].([]any); r.status != 200 || len(data) != 1 || data[0].(map[string]any)["commands"] != float64(1) {
		t.Fatalf("usage after one MCP command: %d %s", r.status, r.body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	p = &mcp.CallToolParams{Name: "bash_code_execution", Arguments: map[string]any{"command": "echo started; exec sleep 600"}}
	p.SetProgressToken("run-2")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, p)
		done <- err
	}()
	for msg := range pl.seen {
		if strings.Contains(msg, "started") {
			break
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// The command ends with its call: the sandbox soon runs no sleep.
	for deadline := time.Now().Add(30 * time.Second); ; {
		o := object(t, callTool(t, cs, "bash_code_execution", map[string]any{"command": "pgrep -x sleep || true"}))
		if strings.TrimSpace(o["stdout"].(string)) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled command still runs: %v", o)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMCPAuthAndPolicy: /mcp answers a request without a valid token 401,
// pointing at the protected resource metadata, which names the endpoint;
// with the org's codeExecution feature off, the code tools say so and run
// nothing, while the file tools still work.
func TestMCPAuthAndPolicy(t *testing.T) {
	s := startServer(t, "", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	for _, bad := range []string{"", "not-a-token"} {
		r := s.do("POST", "/mcp", bad, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"})
		wa := r.header.Get("WWW-Authenticate")
		if r.status != 401 || !strings.Contains(wa, `resource_metadata="`+s.base+`/.well-known/oauth-protected-resource/mcp"`) {
			t.Fatalf("token %q: %d %q %s", bad, r.status, wa, r.body)
		}
	}
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		r := s.do("GET", path, "", nil)
		if r.status != 200 || r.json(t)["resource"] != s.base+"/mcp" {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
	// A session answers only its own user; the transport's refusals come
	// in the error envelope (s.do checks each answer against the API
	// document).
	own, _ := mcpSession(t, s, "/mcp", tok)
	if r := s.do("POST", appAPI+"/org/users", tok, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"}); r.status != 201 {
		t.Fatalf("member: %d %s", r.status, r.body)
	}
	member := login(t, s, "m@acme.test", "member-password")
	ping := map[string]any{"jsonrpc": "2.0", "id": 7, "method": "ping"}
	for _, tc := range []struct {
		name, token, session, accept string
		status                       int
	}{
		{"another user's session", member, own.ID(), "application/json, text/event-stream", 403},
		{"an unknown session", tok, "no-such-session", "application/json, text/event-stream", 404},
		{"no event stream accepted", tok, own.ID(), "application/json", 400},
	} {
		r := s.do("POST", "/mcp", tc.token, ping, "Accept", tc.accept, "Mcp-Session-Id", tc.session)
		if r.status != tc.status || r.errorType(t) == "" {
			t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
		}
	}
	if err := own.Ping(context.Background(), nil); err != nil {
		t.Fatalf("the session after another user's request: %v", err)
	}
	// The token may come as X-Api-Key, as for the REST APIs. (A plain
	// client: the answer is the transport's event stream, whose events
	// are JSON-RPC messages, not the API's stream events.)
	req, err := http.NewRequest("POST", s.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":`+
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") == "" || !strings.Contains(string(body), `"serverInfo"`) {
		t.Fatalf("initialize with X-Api-Key: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if r := s.do("PATCH", appAPI+"/org/features", tok, map[string]any{"codeExecution": map[string]any{"enabled": false}}); r.status != 200 {
		t.Fatalf("policy: %d %s", r.status, r.body)
	}
	cs, _ := mcpSession(t, s, "/mcp", tok)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"bash_code_execution", map[string]any{"command": "touch /mnt/user-data/outputs/ran"}},
		{"code_execution", map[string]any{"code": "open('/mnt/user-data/outputs/ran', 'w')"}},
		{"sandbox_bash", map[string]any{"command": "touch /mnt/user-data/outputs/ran"}},
	} {
		res := callTool(t, cs, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(text(t, res), "Code execution is switched off by your organization's policy") {
			t.Fatalf("%s with code execution off: %s", tc.tool, text(t, res))
		}
	}
	mustOK(t, "write_file", callTool(t, cs, "write_file", map[string]any{"path": "outputs/by-hand.txt", "content": "x"}))
	for _, x := range object(t, callTool(t, cs, "list_files", map[string]any{}))["data"].([]any) {
		if x.(map[string]any)["filename"] == "ran" {
			t.Fatal("a code tool ran with code execution off")
		}
	}
}

// mcpClients returns the folder of the pinned MCP clients (testdata/
// mcpclients: the MCP Inspector's CLI and the Claude Code CLI, installed by
// scripts/test.sh); missing node or packages fail under CI.
func mcpClients(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "mcpclients"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node is missing: the MCP clients cannot run")
	}
	for _, pkg := range []string{"@modelcontextprotocol/inspector-cli", "@anthropic-ai/claude-code"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
			missing(t, "the MCP clients are not installed (npm ci --prefix cmd/threadbox/testdata/mcpclients): %v", err)
		}
	}
	return dir
}

// TestMCPInspectorCLI: the MCP Inspector's CLI, a client of another SDK
// (the TypeScript one), lists the endpoint's tools and calls one.
func TestMCPInspectorCLI(t *testing.T) {
	dir := mcpClients(t)
	s := startServer(t, "", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	inspect := func(args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		build := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "build")
		cmd := exec.CommandContext(ctx, "node", append([]string{"index.js", s.base + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + tok}, args...)...)
		// The CLI looks for its package.json by a path relative to the
		// working directory, which it then imports relative to itself: it
		// runs from its own folder.
		cmd.Dir = build
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("inspector %v: %v\n%s\n%s", args, err, out, stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("inspector %v: not JSON: %s", args, out)
		}
		return m
	}
	var names []string
	for _, tool := range inspect("--method", "tools/list")["tools"].([]any) {
		tool := tool.(map[string]any)
		if tool["inputSchema"].(map[string]any)["type"] != "object" {
			t.Errorf("%v: schema %v", tool["name"], tool["inputSchema"])
		}
		names = append(names, tool["name"].(string))
	}
	for _, want := range []string{"bash_code_execution", "text_editor_code_execution", "code_execution", "sandbox_bash", "repl_execute", "exec_command", "write_stdin", "edit_file", "list_files", "read_file", "write_file", "delete_file", "list_threads", "use_sandbox"} {
		if !slices.Contains(names, want) {
			t.Errorf("the inspector does not list %s: %v", want, names)
		}
	}
	res := inspect("--method", "tools/call", "--tool-name", "write_file", "--tool-arg", "path=outputs/inspected.txt", "content=seen")
	if res["isError"] == true {
		t.Fatalf("write_file: %v", res)
	}
	r := s.do("GET", "/api/gpt/v1/files", tok, nil)
	if !strings.Contains(string(r.body), `"filename":"inspected.txt"`) {
		t.Fatalf("files: %d %s", r.status, r.body)
	}
}

// TestMCPClaudeCode: Anthropic's Claude Code CLI in print mode, its model
// the strict fake upstream and threadbox added as an MCP server for one
// thread, completes a turn whose model asks for threadbox's
// bash_code_execution tool; the command writes an output file in the
// thread's sandbox, which the Files API then lists for the thread, and the
// tool result Claude Code hands the model is the Messages API's content.
func TestMCPClaudeCode(t *testing.T) {
	dir := mcpClients(t)
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	const tool = "mcp__threadbox__bash_code_execution"
	fake.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		var req struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		offered := slices.ContainsFunc(req.Tools, func(x struct {
			Name string `json:"name"`
		}) bool {
			return x.Name == tool
		})
		switch {
		case !offered:
			return fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: "ok"}}}
		case len(req.Messages) > 0 && strings.Contains(string(req.Messages[len(req.Messages)-1].Content), `"tool_result"`):
			return fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: "The note is written."}}}
		}
		return fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockToolUse, ID: "toolu_cc1", Name: tool,
			Input: json.RawMessage(`{"command":"echo written by claude code > $OUTPUT_DIR/claude-note.txt && echo done"}`)}}}
	})
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"threadbox": map[string]any{
		"type": "http", "url": s.base + "/mcp/threads/" + f.tid, "headers": map[string]string{"Authorization": "Bearer " + f.admin},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "claude"), "-p", "Write a note in the thread's outputs.",
		"--bare", "--mcp-config", cfgFile, "--strict-mcp-config", "--allowedTools", tool, "--output-format", "json", "--model", "claude-sonnet-4-5")
	home := t.TempDir()
	cmd.Dir = home
	cmd.Env = []string{
		"HOME=" + home, "PATH=" + os.Getenv("PATH"),
		"ANTHROPIC_BASE_URL=" + fake.URL(), "ANTHROPIC_API_KEY=test-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
		// Loopback only: any other address goes to a closed port.
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost",
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("claude: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var res struct {
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.IsError || res.Result != "The note is written." {
		t.Fatalf("claude's result: %v %s", err, out)
	}
	if refused := fake.Refused(); len(refused) > 0 {
		t.Fatalf("the fake upstream refused Claude Code's requests: %v", refused)
	}
	var toolResult string
	for _, r := range fake.Requests() {
		if strings.Contains(string(r.Body), `"tool_use_id":"toolu_cc1"`) {
			toolResult = string(r.Body)
		}
	}
	if !strings.Contains(toolResult, `bash_code_execution_result`) || !strings.Contains(toolResult, `done\\n`) {
		t.Fatalf("the tool result Claude Code sent the model: %s", toolResult)
	}
	r := s.do("GET", "/api/gpt/v1/files?scope_id="+f.tid, f.admin, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"filename":"claude-note.txt"`) {
		t.Fatalf("the thread's files: %d %s", r.status, r.body)
	}
}

// TestMCPRunningSandboxesQuota: the running-sandbox quota bounds MCP calls
// as it bounds turns: with runningSandboxesPerUser 1, a call in a second
// container (a thread's, chosen with use_sandbox) is the tool's error
// naming the quota, before its folders or sandbox are made, and the
// running one keeps serving.
func TestMCPRunningSandboxesQuota(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	f.patchFeatures(t, map[string]any{"quotas": map[string]any{"runningSandboxesPerUser": 1}})
	cs, _ := mcpSession(t, s, "/mcp", f.admin)
	echo := func(word string) *mcp.CallToolResult {
		t.Helper()
		return callTool(t, cs, "bash_code_execution", map[string]any{"command": "echo " + word})
	}
	if o := object(t, echo("one")); o["stdout"] != "one\n" {
		t.Fatalf("first sandbox: %v", o)
	}
	mustOK(t, "use_sandbox", callTool(t, cs, "use_sandbox", map[string]any{"thread_id": f.tid}))
	res := echo("two")
	if !res.IsError || !strings.Contains(text(t, res), `quota "runningSandboxesPerUser" reached`) {
		t.Fatalf("second sandbox: %s", text(t, res))
	}
	noFolder(t, s, f.admin, f.tid)
	if got := sandboxesOf(t, s); len(got) != 1 {
		t.Fatalf("sandboxes after the refusal: %v", got)
	}
	mustOK(t, "use_sandbox", callTool(t, cs, "use_sandbox", map[string]any{}))
	if o := object(t, echo("again")); o["stdout"] != "again\n" {
		t.Fatalf("the running sandbox: %v", o)
	}
}
