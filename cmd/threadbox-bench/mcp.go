package main

// The MCP section: one sandbox_bash command through the MCP endpoint (the
// official Go SDK's client, one session) against the same command through
// the Messages API's tool loop (a model step asking for it, the command,
// the model step after its result), in one run, on one threadbox with
// docker sandboxes and the fake upstream.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

// mcpOpts configure the MCP section.
type mcpOpts struct {
	n int // round trips per row
}

// mcpCommand is the command both paths run.
const mcpCommand = "true"

// mcpReply answers the section's Messages API requests: "sandbox loop"
// asks for one sandbox_bash call of mcpCommand, then a short text; anything
// else is a short text at once.
func mcpReply(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
	text := fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "ok, done."}}, Usage: wire.Usage{InputTokens: 12, OutputTokens: 3}}
	if !bytes.Contains(body, []byte("sandbox loop")) || bytes.Contains(body, []byte(`"tool_result"`)) {
		return text
	}
	return fakeupstream.Reply{Content: []wire.ContentBlock{{
		Type: wire.BlockToolUse, ID: fmt.Sprintf("toolu_%d", time.Now().UnixNano()),
		Name: "sandbox_bash", Input: json.RawMessage(`{"command":"` + mcpCommand + `"}`),
	}}}
}

// bearer adds a bearer token to each request of the MCP client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// benchMCP prints the MCP table.
func benchMCP(ctx context.Context, o opts, out io.Writer) error {
	n := o.mcp.n
	up := fakeupstream.New()
	defer up.Close()
	up.SetFallback(mcpReply)
	srv, done, err := startDockerThreadbox(ctx, o, "mcp", "MODEL_PROVIDER=anthropic", "MODEL_BASE_URL="+up.URL(), "MODEL_NAME=bench-model", "THREADBOX_PROCS="+o.messages.procs)
	if err != nil {
		return err
	}
	defer done()

	hc := &http.Client{Transport: bearer{srv.token, &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "threadbox-bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.base + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("mcp connect: %w", err)
	}
	defer cs.Close()
	mcpCall := func() (time.Duration, error) {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_bash", Arguments: map[string]any{"command": mcpCommand}})
		if err != nil {
			return 0, err
		}
		if res.IsError {
			return 0, fmt.Errorf("sandbox_bash: %+v", res.Content)
		}
		return time.Since(start), nil
	}
	mcpList := func() (time.Duration, error) {
		start := time.Now()
		_, err := cs.ListTools(ctx, nil)
		return time.Since(start), err
	}
	// The same tools/list as a plain HTTP POST in the session: the
	// server's share of the SDK client's round trip.
	rawList := func() (time.Duration, error) {
		req, err := http.NewRequest("POST", srv.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"sandbox_bash"`)) {
			return 0, fmt.Errorf("tools/list: %d %v %.200s", resp.StatusCode, err, b)
		}
		return time.Since(start), nil
	}
	// Both paths run in the caller's default container.
	const tools = `"tools":[{"type":"sandbox_v1","name":"sandbox_bash"}]`
	loop := `{"model":"default","max_tokens":64,` + tools + `,"messages":[{"role":"user","content":"sandbox loop"}]}`
	none := `{"model":"default","max_tokens":64,` + tools + `,"messages":[{"role":"user","content":"hello"}]}`
	plain := &http.Client{Transport: &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}
	through := func(body string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return post(plain, srv.base+"/api/gpt/v1/messages", srv.token, body) }
	}
	direct := func() (time.Duration, error) {
		return post(plain, up.URL()+"/v1/messages", "", `{"model":"bench-model","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`)
	}
	// Warm up: the sandbox, connections, code paths; and check that the
	// loop runs the command.
	for range 10 {
		for _, f := range []func() (time.Duration, error){mcpCall, mcpList, rawList, through(loop), through(none), direct} {
			if _, err := f(); err != nil {
				return err
			}
		}
	}
	reqs := up.Requests()
	if last := reqs[len(reqs)-3].Body; !bytes.Contains(last, []byte(`"tool_result"`)) {
		return fmt.Errorf("the Messages API loop ran no sandbox_bash call: %s", last)
	}

	type row struct {
		name string
		fn   func() (time.Duration, error)
		d    []time.Duration
	}
	rows := []*row{
		{name: "MCP tools/call sandbox_bash `" + mcpCommand + "`", fn: mcpCall},
		{name: "Messages API, one sandbox_bash `" + mcpCommand + "` in the tool loop (two model steps + the command)", fn: through(loop)},
		{name: "Messages API, sandbox_bash offered, no call (one model step)", fn: through(none)},
		{name: "MCP tools/list (the endpoint's floor)", fn: mcpList},
		{name: "MCP tools/list as a plain HTTP POST in the session (no SDK client)", fn: rawList},
		{name: "fake upstream called directly (one model step's own time)", fn: direct},
	}
	fmt.Fprintf(os.Stderr, "bench: mcp (%d per row)\n", n)
	// The rows take turns in rounds, so that the machine's drift weighs on
	// all alike.
	for range rounds {
		for _, r := range rows {
			d, err := timedConcurrent(1, max(1, n/rounds), r.fn)
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			r.d = append(r.d, d...)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(out, "\n### MCP sandbox_bash round trip vs the Messages API tool loop (n=%d per row, concurrency 1), %s, load average %s\n\n",
		len(rows[0].d), time.Now().UTC().Format(time.RFC3339), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	fmt.Fprintln(out, "| measurement | p50 | p99 |")
	fmt.Fprintln(out, "|---|---:|---:|")
	for _, r := range rows {
		p50, p99 := percentiles(r.d)
		fmt.Fprintf(out, "| %s | %s | %s |\n", r.name, ms(p50), ms(p99))
	}
	m50, _ := percentiles(rows[0].d)
	l50, _ := percentiles(rows[1].d)
	z50, _ := percentiles(rows[2].d)
	fmt.Fprintf(out, "\nThe command's share of the tool loop (loop p50 − no-call p50, one model step and the loop's own work included): %s; through MCP: %s.\n", ms(l50-z50), ms(m50))
	return nil
}
