package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	msgwire "threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

// upstreamMessages decodes the messages of an upstream request in either
// wire format: role and, per message, its blocks as "type:text" strings
// (tool calls as the type alone).
func upstreamMessages(t *testing.T, req fakeupstream.Request) (roles []string, texts [][]string) {
	t.Helper()
	var body struct {
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []any           `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	for _, m := range body.Messages {
		if m.Role == "system" {
			continue
		}
		roles = append(roles, m.Role)
		var parts []string
		var s string
		var blocks []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		switch {
		case json.Unmarshal(m.Content, &s) == nil:
			parts = append(parts, "text:"+s)
		case json.Unmarshal(m.Content, &blocks) == nil:
			for _, b := range blocks {
				parts = append(parts, b.Type+":"+b.Text)
			}
		}
		for range m.ToolCalls {
			parts = append(parts, "tool_call:")
		}
		texts = append(texts, parts)
	}
	return roles, texts
}

// toolsOf counts the tools an upstream request offers.
func toolsOf(t *testing.T, req fakeupstream.Request) int {
	t.Helper()
	var body struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	return len(body.Tools)
}

// TestCodeExecutionSwitchedOffMidThread: a thread ran code; the admin
// switches code execution off; the next turn sends no tools, so the
// history's calls reach the strict upstream as text it accepts (both wire
// formats); switched on again, calls work as before.
func TestCodeExecutionSwitchedOffMidThread(t *testing.T) {
	for _, provider := range []string{"anthropic", "openai"} {
		t.Run(provider, func(t *testing.T) {
			databases(t, func(t *testing.T, dbURL string) {
				s, fake := modelServer(t, dbURL, provider, nil)
				f := newWSFixture(t, s)
				turn := func(content string, code bool) response {
					body := map[string]any{"content": content}
					if code {
						body["pgpt"] = map[string]any{"tools": []any{"code_execution"}}
					}
					return s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, body)
				}
				create := func(name string) msgwire.ContentBlock {
					return call(msgwire.SubToolTextEditor, map[string]any{"command": "create", "path": "/mnt/user-data/outputs/" + name, "file_text": "x"})
				}
				fake.Push(steps(create("a.txt")), textStep("saved a"))
				if r := turn("save a", true); r.status != 200 || !strings.Contains(string(r.body), "saved a") {
					t.Fatalf("first turn: %d %s", r.status, r.body)
				}
				setFeatures := func(on bool) {
					if r := s.do("PATCH", appAPI+"/org/features", f.admin, map[string]any{"codeExecution": map[string]any{"enabled": on}}); r.status != 200 {
						t.Fatalf("policy: %d %s", r.status, r.body)
					}
				}
				setFeatures(false)
				fake.Push(textStep("no code now"))
				if r := turn("and now?", true); r.status != 200 || !strings.Contains(string(r.body), "no code now") {
					t.Fatalf("turn with code execution off: %d %s (refused upstream: %v)", r.status, r.body, fake.Refused())
				}
				reqs := fake.Requests()
				last := reqs[len(reqs)-1]
				if toolsOf(t, last) != 0 {
					t.Fatalf("tools offered while code execution is off: %s", last.Body)
				}
				if !strings.Contains(string(last.Body), "no longer offered") {
					t.Fatalf("the earlier call is not in the history as text: %s", last.Body)
				}
				setFeatures(true)
				fake.Push(steps(create("b.txt")), textStep("saved b"))
				if r := turn("save b", true); r.status != 200 || !strings.Contains(string(r.body), "saved b") {
					t.Fatalf("turn with code execution on again: %d %s", r.status, r.body)
				}
				if refused := fake.Refused(); len(refused) != 0 {
					t.Fatalf("the upstream refused requests a real provider would refuse: %v", refused)
				}
			})
		})
	}
}

// TestMessagesAPIContinuedWithoutTools: a client continues a Messages API
// conversation whose history holds code-execution calls and results, with
// no tools this time; the strict upstream accepts what threadbox sends.
func TestMessagesAPIContinuedWithoutTools(t *testing.T) {
	for _, provider := range []string{"anthropic", "openai"} {
		t.Run(provider, func(t *testing.T) {
			s, fake := modelServer(t, "", provider, nil)
			tok := s.bootstrap("acme", "admin@acme.test")
			fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "create", "path": "/mnt/user-data/outputs/r.txt", "file_text": "x"})), textStep("created"))
			first := map[string]any{"model": "default", "max_tokens": 256, "container": "conv",
				"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
				"messages": []any{map[string]any{"role": "user", "content": "make a file"}}}
			r := s.do("POST", "/api/gpt/v1/messages", tok, first)
			if r.status != 200 {
				t.Fatalf("first request: %d %s", r.status, r.body)
			}
			var resp struct {
				Content []json.RawMessage `json:"content"`
			}
			if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Content) < 3 {
				t.Fatalf("first answer: %s", r.body)
			}
			fake.Push(textStep("you are welcome"))
			next := map[string]any{"model": "default", "max_tokens": 256, "container": "conv",
				"messages": []any{
					map[string]any{"role": "user", "content": "make a file"},
					map[string]any{"role": "assistant", "content": resp.Content},
					map[string]any{"role": "user", "content": "thanks"},
				}}
			r = s.do("POST", "/api/gpt/v1/messages", tok, next)
			if r.status != 200 || !strings.Contains(string(r.body), "you are welcome") {
				t.Fatalf("continued without tools: %d %s (refused upstream: %v)", r.status, r.body, fake.Refused())
			}
			if refused := fake.Refused(); len(refused) != 0 {
				t.Fatalf("refused upstream: %v", refused)
			}
		})
	}
}

// TestToolOutputCapSetting: TOOL_MAX_OUTPUT_BYTES bounds what a tool shows
// the model (here a text editor view of a larger file).
func TestToolOutputCapSetting(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", map[string]string{"TOOL_MAX_OUTPUT_BYTES": "1000"})
	tok := s.bootstrap("acme", "admin@acme.test")
	big := strings.Repeat("0123456789\n", 500)
	fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "create", "path": "big.txt", "file_text": big})),
		steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "view", "path": "big.txt"})), textStep("seen"))
	r := s.do("POST", "/api/gpt/v1/messages", tok, map[string]any{"model": "default", "max_tokens": 256, "container": "cap",
		"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
		"messages": []any{map[string]any{"role": "user", "content": "look"}}})
	if r.status != 200 {
		t.Fatalf("request: %d %s", r.status, r.body)
	}
	var resp struct {
		Content []struct {
			Type    string `json:"type"`
			Content struct {
				Content string `json:"content"`
			} `json:"content"`
		} `json:"content"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	var view string
	for _, b := range resp.Content {
		if b.Type == "text_editor_code_execution_tool_result" && b.Content.Content != "" {
			view = b.Content.Content
		}
	}
	if view == "" || len(view) > 1200 || len(view) < 500 {
		t.Fatalf("a view under a 1000-byte cap is %d bytes: %s", len(view), r.body)
	}
	if _, err := loadConfig(func(k string) string {
		if k == "TOOL_MAX_OUTPUT_BYTES" {
			return "0"
		}
		return ""
	}); err == nil || !strings.Contains(err.Error(), "TOOL_MAX_OUTPUT_BYTES") {
		t.Fatalf("a zero cap: %v", err)
	}
}

// TestSDKSurface: what the official SDK calls beside Messages works here:
// the models, the token count (the Anthropic upstream's) and the Files
// API without scope_id (the caller's default container), so a file
// uploaded with client.Beta.Files.Upload is a container_upload of the next
// request unchanged.
func TestSDKSurface(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	page, err := cl.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "fake-model,default" {
		t.Fatalf("models %v", ids)
	}
	if m, err := cl.Models.Get(ctx, "default", anthropic.ModelGetParams{}); err != nil || m.ID != "default" || m.Type != "model" {
		t.Fatalf("model default: %+v %v", m, err)
	}
	if _, err := cl.Models.Get(ctx, "no-such-model", anthropic.ModelGetParams{}); err == nil {
		t.Fatal("an unknown model was found")
	} else if st, body := apiStatus(t, err); st != 404 || !strings.Contains(body, "not_found_error") {
		t.Fatalf("unknown model: %d %s", st, body)
	}

	short, err := cl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "default", Messages: userText("hi")})
	if err != nil {
		t.Fatal(err)
	}
	long, err := cl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "default", Messages: userText(strings.Repeat("many words ", 100))})
	if err != nil || short.InputTokens <= 0 || long.InputTokens <= short.InputTokens+150 || strings.Contains(long.RawJSON(), "estimated") {
		t.Fatalf("counts %+v %+v %v", short, long, err)
	}
	if r := s.do("POST", "/api/gpt/v1/messages/count_tokens", tok, map[string]any{"model": "default"}); r.status != 400 || r.errorType(t) != "invalid_request_error" {
		t.Fatalf("count without messages: %d %s", r.status, r.body)
	}

	f, err := cl.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("uploaded bytes"), "notes.txt", "text/plain")})
	if err != nil {
		t.Fatalf("SDK upload without scope_id: %v", err)
	}
	fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "view", "path": "/mnt/user-data/uploads/notes.txt"})), textStep("read it"))
	msg, err := cl.Messages.New(ctx, msgParams("", []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("read"), anthropic.NewContainerUploadBlock(f.ID))}, codeExecTool...))
	if err != nil {
		t.Fatalf("a container_upload of the uploaded file: %v", err)
	}
	if v := editorResult(t, msg.Content, 0); !strings.Contains(v.Content, "uploaded bytes") {
		t.Fatalf("the file in the default container: %+v", v)
	}
}

// TestRequestIDs: every answer carries a request-id header, and an error
// body names the same id (request_id), as Anthropic's API does.
func TestRequestIDs(t *testing.T) {
	s := startServer(t, "", map[string]string{"LOG_LEVEL": "info"})
	tok := s.bootstrap("acme", "admin@acme.test")
	ok := s.do("GET", appAPI+"/project", tok, nil)
	bad := s.do("GET", appAPI+"/project/prj_missing", tok, nil)
	again := s.do("GET", appAPI+"/project", tok, nil)
	rid := bad.header.Get("request-id")
	if !strings.HasPrefix(ok.header.Get("request-id"), "req_") || !strings.HasPrefix(rid, "req_") || ok.header.Get("request-id") == again.header.Get("request-id") {
		t.Fatalf("request ids %q %q %q", ok.header.Get("request-id"), rid, again.header.Get("request-id"))
	}
	if bad.status != 404 || bad.json(t)["request_id"] != rid {
		t.Fatalf("error body %d %s, header %q", bad.status, bad.body, rid)
	}
}

// TestForkDoesNotReportCopiedOutputs: the first turn in a forked thread
// does not report the outputs the fork copied as new artifacts; a file it
// writes is one.
func TestForkDoesNotReportCopiedOutputs(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	f := newWSFixture(t, s)
	editorTurn(t, s, fake, f.admin, f.pid, f.tid, map[string]string{"chart.csv": "a,b\n1,2\n"})
	count := func() int {
		return len(s.do("GET", appAPI+"/project/"+f.pid+"/artifacts", f.admin, nil).json(t)["data"].([]any))
	}
	before := count()
	r := s.do("POST", appAPI+"/thread/"+f.tid+"/fork", f.admin, nil)
	if r.status != 201 {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	fork := r.json(t)["id"].(string)
	fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "create", "path": "/mnt/user-data/outputs/new.txt", "file_text": "new"})), textStep("made"))
	r = s.do("POST", appAPI+"/thread/"+fork+"/messages", f.admin, map[string]any{"content": "make one", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	if r.status != 200 {
		t.Fatalf("turn in the fork: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "chart.csv") || !strings.Contains(string(r.body), "new.txt") {
		t.Fatalf("the fork's turn reported: %s", r.body)
	}
	if got := count(); got != before+1 {
		t.Fatalf("artifacts %d after the fork's turn, want %d", got, before+1)
	}
}
