package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/infra/llm/fakeupstream"
)

// TestSDKModelCapabilities: every model GET /v1/models lists carries the
// capabilities the SDK types, true for what threadbox provides (server
// tools with code execution in each version, programmatic tool calling,
// image and PDF input, Message Batches) and false for what it does not
// (web search).
func TestSDKModelCapabilities(t *testing.T) {
	s, _ := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()
	page, err := cl.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	one, err := cl.Models.Get(ctx, "fake-model", anthropic.ModelGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	models := append(page.Data, *one)
	if len(models) != 3 {
		t.Fatalf("%d models", len(models))
	}
	for _, m := range models {
		c := m.Capabilities
		if !m.JSON.Capabilities.Valid() || !c.ServerTools.Supported || !c.ServerTools.CodeExecution.Supported || !c.CodeExecution.Supported ||
			!c.ImageInput.Supported || !c.PDFInput.Supported || !c.Batch.Supported || c.ServerTools.WebSearch.Supported || !c.JSON.Thinking.Valid() {
			t.Fatalf("model %s: capabilities %s", m.ID, c.RawJSON())
		}
		var versions []string
		if err := json.Unmarshal([]byte(c.ServerTools.CodeExecution.JSON.ExtraFields["versions"].Raw()), &versions); err != nil {
			t.Fatalf("model %s: versions %s", m.ID, c.ServerTools.CodeExecution.RawJSON())
		}
		if strings.Join(versions, ",") != "code_execution_20250522,code_execution_20250825,code_execution_20260120,code_execution_20260521" {
			t.Fatalf("model %s: versions %v", m.ID, versions)
		}
		if m.Lifecycle != anthropic.ModelInfoLifecycleActive || m.JSON.RetiresAt.Valid() {
			t.Fatalf("model %s: %s", m.ID, m.RawJSON())
		}
	}
}

// TestSDKModelsPaging: the models list pages as the Anthropic API's lists
// do: the SDK's auto-pager, a page of one model at a time, finds both
// models once each, and a limit or a cursor the list cannot take is a 400.
func TestSDKModelsPaging(t *testing.T) {
	s, _ := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	var ids []string
	iter := cl.Models.ListAutoPaging(context.Background(), anthropic.ModelListParams{Limit: anthropic.Int(1)})
	for iter.Next() {
		ids = append(ids, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != "fake-model,default" {
		t.Fatalf("paged models %v", ids)
	}
	first := s.do("GET", "/api/gpt/v1/models?limit=1", tok, nil).json(t)
	if len(first["data"].([]any)) != 1 || first["has_more"] != true || first["last_id"] != "fake-model" {
		t.Fatalf("first page %v", first)
	}
	last := s.do("GET", "/api/gpt/v1/models?before_id=default", tok, nil).json(t)
	if len(last["data"].([]any)) != 1 || last["has_more"] != false || last["first_id"] != "fake-model" {
		t.Fatalf("page before default %v", last)
	}
	for _, q := range []string{"limit=0", "limit=abc", "after_id=nope", "after_id=default&before_id=default"} {
		if r := s.do("GET", "/api/gpt/v1/models?"+q, tok, nil); r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
	}
}

// TestSDKCountTokens: with an Anthropic upstream, count_tokens is the
// upstream's count of what a turn would send it (the configured model,
// code execution's sub-tools in place of the code_execution tool), not an
// estimate; an upstream's refusal is the client's error; an upstream that
// cannot count (OpenAI-compatible) gets the estimate, flagged.
func TestSDKCountTokens(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	n, err := cl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "default", Messages: userText("count these words"),
		Tools: []anthropic.MessageCountTokensToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sent fakeupstream.Request
	for _, r := range fake.Requests() {
		if r.Path == "/v1/messages/count_tokens" {
			sent = r
		}
	}
	if sent.Body == nil {
		t.Fatal("the upstream was not asked to count")
	}
	raw := sent.Body
	if n.InputTokens != int64(fakeupstream.CountTokens(raw)) || strings.Contains(n.RawJSON(), "estimated") {
		t.Fatalf("count %s, the upstream counted %d", n.RawJSON(), fakeupstream.CountTokens(raw))
	}
	for _, want := range []string{`"model":"fake-model"`, `"name":"bash_code_execution"`, `"name":"text_editor_code_execution"`} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("the count request lacks %s: %s", want, raw)
		}
	}
	if strings.Contains(string(raw), "max_tokens") || strings.Contains(string(raw), "code_execution_20250825") {
		t.Fatalf("the count request: %s", raw)
	}

	// A request the upstream refuses is the client's 400.
	_, err = cl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model:    "default",
		Messages: []anthropic.MessageParam{anthropic.NewAssistantMessage(anthropic.NewTextBlock("me first"))},
	})
	if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "invalid_request_error") {
		t.Fatalf("refused count: %d %s", st, body)
	}

	o, _ := modelServer(t, "", "openai", nil)
	otok := o.bootstrap("acme", "admin@acme.test")
	ocl := msgClient(o, otok)
	est, err := ocl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "default", Messages: userText("count these words")})
	if err != nil || est.InputTokens <= 0 || !strings.Contains(est.RawJSON(), `"estimated":true`) {
		t.Fatalf("estimate %s %v", est.RawJSON(), err)
	}
}

// TestSDKCacheControlReachesUpstream: the cache_control breakpoints an SDK
// sets on the blocks of a conversation — a text block, a tool_use and its
// tool_result — reach the model upstream with the blocks, as they do on
// the system prompt and the tools, so prompt caching works through
// threadbox.
func TestSDKCacheControlReachesUpstream(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	cache := anthropic.NewCacheControlEphemeralParam()
	text := func(s string) anthropic.ContentBlockParamUnion {
		return anthropic.ContentBlockParamUnion{OfText: &anthropic.TextBlockParam{Text: s, CacheControl: cache}}
	}
	use := anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{ID: "toolu_1", Name: "lookup", Input: map[string]any{}, CacheControl: cache}}
	result := anthropic.ContentBlockParamUnion{OfToolResult: &anthropic.ToolResultBlockParam{ToolUseID: "toolu_1",
		Content: []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: "42"}}}, CacheControl: cache}}
	_, err := cl.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "default", MaxTokens: 16,
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "lookup", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}}},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(text("a long document to cache")),
			anthropic.NewAssistantMessage(use),
			anthropic.NewUserMessage(result, text("and now?")),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	var sent struct {
		Messages []struct {
			Content []map[string]json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, m := range sent.Messages {
		for _, b := range m.Content {
			if string(b["cache_control"]) == `{"type":"ephemeral"}` {
				marked++
			}
		}
	}
	if marked != 4 {
		t.Fatalf("%d of the 4 cache_control breakpoints reached the upstream: %s", marked, reqs[0].Body)
	}
}

// TestToolChoiceForcingCodeExecutionKeepsItsOptions: a tool_choice that
// forces the code_execution tool reaches the upstream as a choice of any of
// its sub-tools with the client's other options kept, so
// disable_parallel_tool_use still holds the model to one call at a time.
func TestToolChoiceForcingCodeExecutionKeepsItsOptions(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	r := s.do("POST", "/api/gpt/v1/messages", tok, `{"model":"default","max_tokens":16,
		"tools":[{"type":"code_execution_20250825","name":"code_execution"}],
		"tool_choice":{"type":"tool","name":"code_execution","disable_parallel_tool_use":true},
		"messages":[{"role":"user","content":"count the files"}]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	var sent struct {
		ToolChoice map[string]any `json:"tool_choice"`
	}
	if err := json.Unmarshal(reqs[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.ToolChoice["type"] != "any" || sent.ToolChoice["disable_parallel_tool_use"] != true || sent.ToolChoice["name"] != nil {
		t.Fatalf("the upstream's tool_choice: %v", sent.ToolChoice)
	}
}

// TestClientToolsNamedAsServerSubTools: a client tool may bear the name of
// one of threadbox's sub-tools (web_fetch, bash_code_execution,
// text_editor_code_execution) when the request does not offer that server
// tool, as with Anthropic: the model's call of it is handed back to the
// client, not run. Beside the server tool of that name it is still a 400.
func TestClientToolsNamedAsServerSubTools(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	for _, name := range []string{"web_fetch", "bash_code_execution", "text_editor_code_execution"} {
		fake.Push(steps(call(name, map[string]any{"url": "https://example.com"})))
		r := s.do("POST", "/api/gpt/v1/messages", tok, `{"model":"default","max_tokens":64,
			"tools":[{"name":"`+name+`","description":"the client's own","input_schema":{"type":"object"}}],
			"messages":[{"role":"user","content":"go"}]}`)
		if r.status != 200 {
			t.Fatalf("a client tool named %s: %d %s", name, r.status, r.body)
		}
		var msg struct {
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Type, Name string
			} `json:"content"`
		}
		if err := json.Unmarshal(r.body, &msg); err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != "tool_use" || len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Content[0].Name != name {
			t.Fatalf("a client tool named %s: %s", name, r.body)
		}
	}
	r := s.do("POST", "/api/gpt/v1/messages", tok, `{"model":"default","max_tokens":64,
		"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"bash_code_execution","input_schema":{"type":"object"}}],
		"messages":[{"role":"user","content":"go"}]}`)
	if r.status != 400 || r.errorType(t) != "invalid_request_error" {
		t.Fatalf("a client tool named as a sub-tool of the request: %d %s", r.status, r.body)
	}
}
