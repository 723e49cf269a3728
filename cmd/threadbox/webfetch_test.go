package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	msgwire "threadbox/app/messages/wire"

	"threadbox/infra/llm/fakeupstream"
)

// TestWebFetchWithCodeExecution runs the web_fetch server tool beside code
// execution through the HTTP API: the model (the fake upstream) fetches a
// page from an HTTPS server on loopback, reads the number in the fetched
// text from its tool result and has bash compute with it in the sandbox.
// The fetch goes through the org's egress policy and ledger; the upstream
// request carries web_fetch as a plain tool, never the server tool's type.
// A host the allowlist lacks, a URL not in the conversation and a call
// past max_uses get the tool's error codes.
func TestWebFetchWithCodeExecution(t *testing.T) {
	w := newEgressWorld(t)
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin,
		"EGRESS_RESOLVER": w.dns, "EGRESS_ALLOW_PRIVATE": "127.0.0.1", "EGRESS_UPSTREAM_ROOTS": w.caFile})
	a := s.bootstrap("acme", "admin@acme.test")
	if r := s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"egress": map[string]any{"enabled": true, "allow": []string{"docs.test"}}}); r.status != 200 {
		t.Fatalf("egress on: %d %s", r.status, r.body)
	}
	page := "https://docs.test:" + w.tlsPort + "/doc.html"
	denied := "https://other.test:" + w.tlsPort + "/hello"
	// The model reads the build number from the last tool result it was
	// sent and has bash double it.
	number := regexp.MustCompile(`build number is (\d+)`)
	fake.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		offered := strings.Contains(string(body), `"name":"bash_code_execution"`)
		if m := number.FindSubmatch(body); m != nil && offered && !strings.Contains(string(body), "bash_code_execution_result") {
			return bashStep("echo $((" + string(m[1]) + " * 2))")
		}
		return textStep("done")
	})
	var lastBody []byte
	send := func(text string, tool map[string]any, calls ...msgwire.ContentBlock) map[string]any {
		t.Helper()
		if len(calls) > 0 {
			fake.Push(steps(calls...))
		}
		r := s.do("POST", "/api/gpt/v1/messages", a, map[string]any{
			"model": "claude-test", "max_tokens": 512,
			"messages": []any{map[string]any{"role": "user", "content": text}},
			"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}, tool},
		})
		if r.status != 200 {
			t.Fatalf("messages: %d %s", r.status, r.body)
		}
		lastBody = r.body
		return r.json(t)
	}
	results := func(m map[string]any, typ string) []map[string]any {
		var out []map[string]any
		for _, b := range m["content"].([]any) {
			if b := b.(map[string]any); b["type"] == typ {
				out = append(out, b["content"].(map[string]any))
			}
		}
		return out
	}
	webFetch := map[string]any{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 3, "max_content_tokens": 1000}

	m := send("Read "+page+" and double its build number.", webFetch, call("web_fetch", map[string]any{"url": page}))
	fetched := results(m, "web_fetch_tool_result")
	if len(fetched) != 1 || fetched[0]["type"] != "web_fetch_result" || fetched[0]["url"] != page {
		t.Fatalf("web_fetch result: %v", m["content"])
	}
	doc := fetched[0]["content"].(map[string]any)
	if src := doc["source"].(map[string]any); doc["type"] != "document" || doc["title"] != "Release notes" || src["data"] != "Release 7\n\nThe build number is 90417." {
		t.Fatalf("document: %v", doc)
	}
	// The official SDK reads the blocks as its own types.
	var msg anthropic.Message
	if err := json.Unmarshal(lastBody, &msg); err != nil {
		t.Fatal(err)
	}
	var sdkDoc anthropic.WebFetchBlock
	for _, b := range msg.Content {
		if b.Type == "web_fetch_tool_result" {
			r := b.AsWebFetchToolResult()
			sdkDoc = r.Content.AsResponseWebFetchResultBlock()
			if r.Caller.Type != "direct" {
				t.Fatalf("caller %+v", r.Caller)
			}
		}
	}
	if sdkDoc.URL != page || sdkDoc.Content.Title != "Release notes" || sdkDoc.Content.Source.Data != "Release 7\n\nThe build number is 90417." {
		t.Fatalf("the SDK read %+v", sdkDoc)
	}
	bash := results(m, "bash_code_execution_tool_result")
	if len(bash) != 1 || bash[0]["stdout"] != "180834\n" {
		t.Fatalf("code execution on the fetched content: %v", m["content"])
	}
	if u := m["usage"].(map[string]any)["server_tool_use"].(map[string]any); u["web_fetch_requests"] != 1.0 || u["code_execution_requests"] != 1.0 {
		t.Fatalf("usage: %v", u)
	}
	for _, req := range fake.Requests() {
		if strings.Contains(string(req.Body), "web_fetch_2025") || strings.Contains(string(req.Body), "web_fetch_tool_result") {
			t.Fatalf("the upstream was sent the server tool: %s", req.Body)
		}
	}

	// A host the allowlist lacks, a URL the conversation never named,
	// and a third call past max_uses of two.
	two := map[string]any{"type": "web_fetch_20260209", "name": "web_fetch", "max_uses": 2}
	m = send("Compare "+page+" with "+denied+".", two,
		call("web_fetch", map[string]any{"url": denied}),
		call("web_fetch", map[string]any{"url": "https://docs.test:" + w.tlsPort + "/secret-path"}),
		call("web_fetch", map[string]any{"url": page}))
	var codes []string
	for _, r := range results(m, "web_fetch_tool_result") {
		codes = append(codes, r["type"].(string)+":"+fmtCode(r["error_code"]))
	}
	if want := "web_fetch_tool_result_error:url_not_allowed web_fetch_tool_result_error:url_not_in_prior_context web_fetch_tool_result_error:max_uses_exceeded"; strings.Join(codes, " ") != want {
		t.Fatalf("results %v, want %s", codes, want)
	}

	// Streamed through the official SDK, with its own tool type: the
	// result block arrives whole in its content_block_start.
	fake.Push(steps(call("web_fetch", map[string]any{"url": page})))
	cl := msgClient(s, a)
	stream := cl.Messages.NewStreaming(context.Background(), msgParams("", userText("Summarise "+page),
		anthropic.ToolUnionParam{OfWebFetchTool20250910: &anthropic.WebFetchTool20250910Param{MaxUses: anthropic.Int(1)}}))
	var acc anthropic.Message
	streamed := ""
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "content_block_start" && ev.ContentBlock.Type == "web_fetch_tool_result" {
			streamed = ev.ContentBlock.AsWebFetchToolResult().Content.AsResponseWebFetchResultBlock().Content.Source.Data
		}
	}
	if err := stream.Err(); err != nil || streamed != "Release 7\n\nThe build number is 90417." || acc.Usage.ServerToolUse.WebFetchRequests != 1 {
		t.Fatalf("streamed: %v %q %+v", err, streamed, acc.Usage)
	}

	// The ledger has the fetch and the refusal, with the turn's org and user.
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := s.do("GET", "/api/v1/app/org/egress?limit=100", a, nil)
		body := string(r.body)
		if strings.Contains(body, `"host":"docs.test","port":`+w.tlsPort) && strings.Contains(body, `"host":"other.test"`) && strings.Contains(body, `"rule":"no-match"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger lacks the fetches: %s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fmtCode(v any) string {
	s, _ := v.(string)
	return s
}
