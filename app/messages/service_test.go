package messages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

// fakeModel answers steps from a script and records the requests.
type fakeModel struct {
	mu    sync.Mutex
	steps []*StepResult
	reqs  []StepRequest
	err   error
}

func (m *fakeModel) next(req StepRequest) (*StepResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	if m.err != nil {
		return nil, m.err
	}
	if len(m.steps) == 0 {
		return nil, errors.New("fake model: script exhausted")
	}
	r := m.steps[0]
	m.steps = m.steps[1:]
	return r, nil
}

func (m *fakeModel) Step(ctx context.Context, req StepRequest) (*StepResult, error) {
	return m.next(req)
}

// StreamStep streams text in two halves and tool input in two pieces.
func (m *fakeModel) StreamStep(ctx context.Context, req StepRequest, emit func(StepEvent) error) (*StepResult, error) {
	r, err := m.next(req)
	if err != nil {
		return nil, err
	}
	for i, b := range r.Content {
		start := b
		start.Text, start.Input = "", nil
		if err := emit(StepEvent{Kind: StepBlockStart, Index: i, Block: start}); err != nil {
			return nil, err
		}
		var parts []wire.BlockDelta
		switch b.Type {
		case wire.BlockText:
			h := len(b.Text) / 2
			parts = []wire.BlockDelta{{Type: wire.DeltaText, Text: b.Text[:h]}, {Type: wire.DeltaText, Text: b.Text[h:]}}
		case wire.BlockToolUse:
			h := len(b.Input) / 2
			parts = []wire.BlockDelta{{Type: wire.DeltaInputJSON, PartialJSON: string(b.Input[:h])}, {Type: wire.DeltaInputJSON, PartialJSON: string(b.Input[h:])}}
		}
		for _, d := range parts {
			if err := emit(StepEvent{Kind: StepBlockDelta, Index: i, Delta: d}); err != nil {
				return nil, err
			}
		}
		if err := emit(StepEvent{Kind: StepBlockStop, Index: i}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// fakeTools answers bash with the command echoed and the editor with a
// create result.
type fakeTools struct {
	mu    sync.Mutex
	calls []ToolCall
	block bool
}

func (f *fakeTools) Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if call.Name == wire.SubToolTextEditor {
		return &wire.ToolResult{Type: wire.ResultEditorCreate}, nil
	}
	var in struct{ Command string }
	_ = json.Unmarshal(call.Input, &in)
	if in.Command == "missing" {
		return ErrorResult(call.Name, wire.CodeUnavailable, "File not found: /home/agent/workspace/missing.txt"), nil
	}
	return &wire.ToolResult{Type: wire.ResultBash, Stdout: "ran " + in.Command}, nil
}

func text(s string) wire.ContentBlock { return wire.ContentBlock{Type: wire.BlockText, Text: s} }

func toolUse(id, name, input string) wire.ContentBlock {
	return wire.ContentBlock{Type: wire.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(input)}
}

func step(stop string, blocks ...wire.ContentBlock) *StepResult {
	return &StepResult{Content: blocks, StopReason: stop, Usage: wire.Usage{InputTokens: 10, OutputTokens: 5}}
}

func request(toolType string, msgs ...wire.Message) *wire.Request {
	r := &wire.Request{Model: "default", MaxTokens: 100, Messages: msgs}
	if toolType != "" {
		r.Tools = []wire.Tool{{Type: toolType, Name: "code_execution"}}
	}
	return r
}

func user(s string) wire.Message {
	return wire.Message{Role: wire.RoleUser, Content: []wire.ContentBlock{text(s)}}
}

var testContainer = &wire.Container{ID: "my-box", ExpiresAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}

// runBoth runs the request non-streaming and streaming against the same
// script and checks both give the same response.
func runBoth(t *testing.T, cfg Config, script func() []*StepResult, req *wire.Request, opts RunOptions) (*wire.Response, *fakeModel, *fakeTools, []wire.Event) {
	t.Helper()
	var first, last *wire.Response
	var model *fakeModel
	var tools *fakeTools
	var events []wire.Event
	for _, stream := range []bool{false, true} {
		model = &fakeModel{steps: script()}
		tools = &fakeTools{}
		svc := New(model, allTools(tools), cfg)
		r := *req
		r.Stream = stream
		events = nil
		var c Collector
		err := svc.Run(context.Background(), &r, opts, SinkFunc(func(ev wire.Event) error {
			events = append(events, ev)
			return c.Send(ev)
		}))
		if err != nil {
			t.Fatalf("Run(stream=%v): %v", stream, err)
		}
		resp := c.Response()
		if first == nil {
			first = resp
			continue
		}
		last = resp
		a, _ := json.Marshal(first)
		b, _ := json.Marshal(resp)
		// ids differ between runs; compare shapes with ids masked.
		if mask(string(a)) != mask(string(b)) {
			t.Fatalf("streaming and non-streaming differ:\n%s\n%s", a, b)
		}
	}
	return last, model, tools, events
}

func mask(s string) string {
	var out strings.Builder
	for {
		i := strings.Index(s, `_`)
		j := -1
		for _, p := range []string{"srvtoolu_", "msg_"} {
			if k := strings.Index(s, p); k >= 0 && (j < 0 || k < j) {
				j = k
				i = k + len(p)
			}
		}
		if j < 0 {
			out.WriteString(s)
			return out.String()
		}
		out.WriteString(s[:i])
		s = s[i:]
		end := strings.IndexAny(s, `"`)
		if end < 0 {
			end = len(s)
		}
		out.WriteString("X")
		s = s[end:]
	}
}

func TestMultiStepLoop(t *testing.T) {
	script := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, text("Let me check."), toolUse("toolu_a", wire.SubToolBash, `{"command":"ls"}`)),
			step(wire.StopToolUse, toolUse("toolu_b", wire.SubToolTextEditor, `{"command":"create","path":"a.txt","file_text":"x"}`)),
			step(wire.StopEndTurn, text("Done.")),
		}
	}
	var hooked []string
	endExpiry := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) // the turn's end moves the expiry on
	opts := RunOptions{ContainerID: "u1--my-box", Container: testContainer, OnToolCall: func(ctx context.Context, c ToolCall, r *wire.ToolResult) {
		hooked = append(hooked, c.Name+":"+r.Type)
	}, ExpiresAt: func() time.Time { return endExpiry }}
	resp, model, tools, events := runBoth(t, Config{}, script, request(wire.ToolTypeCodeExecution2508, user("list files")), opts)

	wantTypes := []string{wire.BlockText, wire.BlockServerToolUse, wire.BlockBashResult, wire.BlockServerToolUse, wire.BlockTextEditorResult, wire.BlockText}
	if len(resp.Content) != len(wantTypes) {
		t.Fatalf("content = %+v", resp.Content)
	}
	for i, w := range wantTypes {
		if resp.Content[i].Type != w {
			t.Fatalf("block %d type %s, want %s", i, resp.Content[i].Type, w)
		}
	}
	srv := resp.Content[1]
	if !strings.HasPrefix(srv.ID, "srvtoolu_") || srv.Name != wire.SubToolBash || string(srv.Input) != `{"command":"ls"}` {
		t.Fatalf("server_tool_use = %+v", srv)
	}
	if resp.Content[2].ToolUseID != srv.ID || resp.Content[2].Result.Stdout != "ran ls" {
		t.Fatalf("result = %+v", resp.Content[2])
	}
	if resp.Content[4].ToolUseID != resp.Content[3].ID || resp.Content[3].ID == srv.ID {
		t.Fatalf("editor ids: %q %q", resp.Content[3].ID, resp.Content[4].ToolUseID)
	}
	if resp.StopReason != wire.StopEndTurn || resp.Usage.ServerToolUse == nil || resp.Usage.ServerToolUse.CodeExecutionRequests != 2 {
		t.Fatalf("stop %q usage %+v", resp.StopReason, resp.Usage)
	}
	if resp.Usage.InputTokens != 30 || resp.Usage.OutputTokens != 15 {
		t.Fatalf("usage = %+v", resp.Usage)
	}
	if resp.Container == nil || resp.Container.ID != "my-box" || !resp.Container.ExpiresAt.Equal(endExpiry) {
		t.Fatalf("container = %+v", resp.Container)
	}
	if testContainer.ExpiresAt.Equal(endExpiry) {
		t.Fatal("the options' container was changed")
	}
	if len(tools.calls) != 2 || tools.calls[0].ContainerID != "u1--my-box" || tools.calls[0].ID != srv.ID || tools.calls[0].ScopeID != "my-box" {
		t.Fatalf("tool calls = %+v", tools.calls)
	}
	if len(hooked) != 4 || hooked[0] != "bash_code_execution:bash_code_execution_result" {
		t.Fatalf("hook calls = %v", hooked)
	}
	// The model saw the sub-tools and, on step 2, its own call and the result.
	if len(model.reqs) != 3 {
		t.Fatalf("model steps = %d", len(model.reqs))
	}
	if n := len(model.reqs[0].Tools); n != 2 || model.reqs[0].Tools[0].Name != wire.SubToolBash || model.reqs[0].Tools[1].Name != wire.SubToolTextEditor {
		t.Fatalf("tools sent = %+v", model.reqs[0].Tools)
	}
	h := model.reqs[1].Messages
	if len(h) != 3 || h[1].Role != wire.RoleAssistant || h[2].Role != wire.RoleUser {
		t.Fatalf("step 2 history = %+v", h)
	}
	if tu := h[1].Content[1]; tu.Type != wire.BlockToolUse || tu.ID != tools.calls[0].ID {
		t.Fatalf("step 2 tool_use = %+v", tu)
	}
	if tr := h[2].Content[0]; tr.Type != wire.BlockToolResult || tr.ToolUseID != tools.calls[0].ID || !strings.Contains(string(tr.Content), "ran ls") {
		t.Fatalf("step 2 tool_result = %+v", tr)
	}
	// Stream shape: message_start first, message_delta then message_stop last,
	// the server call's input as input_json_delta, the result in one start.
	if events[0].Type != wire.EventMessageStart || events[len(events)-1].Type != wire.EventMessageStop || events[len(events)-2].Type != wire.EventMessageDelta {
		t.Fatalf("event order: first %s, last %s", events[0].Type, events[len(events)-1].Type)
	}
	var sawInput, sawResult bool
	for i, ev := range events {
		if ev.Type == wire.EventContentBlockDelta && ev.Index == 1 && ev.Delta.Type == wire.DeltaInputJSON {
			sawInput = true
		}
		if ev.Type == wire.EventContentBlockStart && ev.Index == 2 {
			sawResult = ev.ContentBlock.Type == wire.BlockBashResult && ev.ContentBlock.Result != nil && events[i+1].Type == wire.EventContentBlockStop
		}
	}
	if !sawInput || !sawResult {
		t.Fatalf("input_json_delta seen %v, result in one start %v", sawInput, sawResult)
	}
	if events[len(events)-2].MessageDelta.Container == nil {
		t.Fatal("message_delta lacks delta.container")
	}
}

func TestPauseTurnAndContinue(t *testing.T) {
	loop := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"one"}`)),
			step(wire.StopToolUse, toolUse("b", wire.SubToolBash, `{"command":"two"}`)),
		}
	}
	cfg := Config{MaxToolIterations: 2}
	req := request(wire.ToolTypeCodeExecutionV1, user("work"))
	resp, model, _, _ := runBoth(t, cfg, loop, req, RunOptions{Container: testContainer})
	if resp.StopReason != wire.StopPauseTurn || len(resp.Content) != 4 || resp.Content[3].Type != wire.BlockBashResult {
		t.Fatalf("paused response: stop %q content %+v", resp.StopReason, resp.Content)
	}
	if len(model.reqs) != 2 {
		t.Fatalf("model called %d times, want 2", len(model.reqs))
	}

	// Send the paused response back as the assistant turn: the model gets the
	// whole history as tool_use/tool_result pairs ending in a tool result.
	raw, _ := json.Marshal(resp)
	var back wire.Response
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	cont := request(wire.ToolTypeCodeExecutionV1, user("work"), wire.Message{Role: wire.RoleAssistant, Content: back.Content})
	finish := func() []*StepResult { return []*StepResult{step(wire.StopEndTurn, text("All done."))} }
	resp2, model2, tools2, _ := runBoth(t, cfg, finish, cont, RunOptions{})
	if resp2.StopReason != wire.StopEndTurn || len(resp2.Content) != 1 || resp2.Content[0].Text != "All done." {
		t.Fatalf("continued response = %+v", resp2)
	}
	if len(tools2.calls) != 0 {
		t.Fatalf("continuation re-ran tools: %+v", tools2.calls)
	}
	h := model2.reqs[0].Messages
	roles := []string{}
	for _, m := range h {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant,user" {
		t.Fatalf("history roles = %v", roles)
	}
	last := h[len(h)-1].Content[0]
	if last.Type != wire.BlockToolResult || last.ToolUseID != back.Content[2].ID || !strings.Contains(string(last.Content), "ran two") {
		t.Fatalf("last upstream block = %+v", last)
	}
	if h[3].Content[0].Type != wire.BlockToolUse || h[3].Content[0].Name != wire.SubToolBash {
		t.Fatalf("server_tool_use not translated: %+v", h[3].Content[0])
	}
}

func TestPauseOnTurnTime(t *testing.T) {
	now := time.Unix(0, 0)
	cfg := Config{TurnTimeout: time.Minute, Now: func() time.Time { now = now.Add(70 * time.Second); return now }}
	script := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"one"}`)),
			step(wire.StopToolUse, toolUse("b", wire.SubToolBash, `{"command":"two"}`)),
			step(wire.StopEndTurn, text("never")),
		}
	}
	resp, model, _, _ := runBoth(t, cfg, script, request(wire.ToolTypeCodeExecution2605, user("x")), RunOptions{})
	if resp.StopReason != wire.StopPauseTurn || len(model.reqs) != 1 {
		t.Fatalf("stop %q after %d steps", resp.StopReason, len(model.reqs))
	}
}

func TestClientToolsMixedWithServerTools(t *testing.T) {
	weather := wire.Tool{Name: "get_weather", Description: "Weather", InputSchema: json.RawMessage(`{"type":"object"}`)}
	script := func() []*StepResult {
		return []*StepResult{step(wire.StopToolUse,
			toolUse("x", wire.SubToolBash, `{"command":"date"}`),
			toolUse("toolu_client", "get_weather", `{"city":"Oslo"}`))}
	}
	req := request(wire.ToolTypeCodeExecution2508, user("weather and date"))
	req.Tools = append(req.Tools, weather)
	resp, model, tools, _ := runBoth(t, Config{}, script, req, RunOptions{})
	if resp.StopReason != wire.StopToolUse || len(resp.Content) != 2 || resp.Content[0].Type != wire.BlockServerToolUse ||
		resp.Content[1].Type != wire.BlockToolUse || resp.Content[1].ID != "toolu_client" {
		t.Fatalf("response = %+v", resp)
	}
	if len(tools.calls) != 0 {
		t.Fatalf("server call ran before the client answered: %+v", tools.calls)
	}
	if len(model.reqs[0].Tools) != 3 || model.reqs[0].Tools[2].Name != "get_weather" {
		t.Fatalf("tools sent = %+v", model.reqs[0].Tools)
	}

	// The client answers its tool; the pending server call runs first and
	// its result opens the new response.
	srvID := resp.Content[0].ID
	next := request(wire.ToolTypeCodeExecution2508, user("weather and date"),
		wire.Message{Role: wire.RoleAssistant, Content: resp.Content},
		wire.Message{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "toolu_client", Content: json.RawMessage(`"sunny"`)}}})
	next.Tools = append(next.Tools, weather)
	finish := func() []*StepResult { return []*StepResult{step(wire.StopEndTurn, text("Sunny, and the date."))} }
	resp2, model2, tools2, _ := runBoth(t, Config{}, finish, next, RunOptions{})
	if len(tools2.calls) != 1 || tools2.calls[0].ID != srvID {
		t.Fatalf("pending call not run: %+v", tools2.calls)
	}
	if len(resp2.Content) != 2 || resp2.Content[0].Type != wire.BlockBashResult || resp2.Content[0].ToolUseID != srvID || resp2.Content[1].Type != wire.BlockText {
		t.Fatalf("response = %+v", resp2.Content)
	}
	if resp2.Usage.ServerToolUse.CodeExecutionRequests != 1 {
		t.Fatalf("usage = %+v", resp2.Usage)
	}
	h := model2.reqs[0].Messages
	if len(h) != 3 {
		t.Fatalf("history = %+v", h)
	}
	results := h[2].Content
	if len(results) != 2 || results[0].ToolUseID != srvID || results[1].ToolUseID != "toolu_client" {
		t.Fatalf("tool results = %+v", results)
	}
}

func TestNotConfiguredAndDetail(t *testing.T) {
	for _, tc := range []struct {
		toolType   string
		wantDetail bool
	}{{wire.ToolTypeCodeExecutionV1, true}, {wire.ToolTypeCodeExecution2508, false}, {wire.ToolTypeCodeExecution2601, false}} {
		t.Run(tc.toolType, func(t *testing.T) {
			model := &fakeModel{steps: []*StepResult{
				step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"ls"}`)),
				step(wire.StopEndTurn, text("no sandbox")),
			}}
			svc := New(model, Tools{}, Config{})
			resp, err := svc.Create(context.Background(), request(tc.toolType, user("x")), RunOptions{Container: testContainer})
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(resp.Content[1])
			want := `{"type":"bash_code_execution_tool_result","tool_use_id":"` + resp.Content[0].ID + `","content":{"type":"bash_code_execution_tool_result_error","error_code":"unavailable"`
			if tc.wantDetail {
				want += `,"detail":{"code":"unavailable","explanation":"code_execution provider is not configured."}}}`
			} else {
				want += `}}`
			}
			if string(raw) != want {
				t.Fatalf("got  %s\nwant %s", raw, want)
			}
			// The model always reads the explanation.
			tr := model.reqs[1].Messages[2].Content[0]
			if !tr.IsError || !strings.Contains(string(tr.Content), "not configured") {
				t.Fatalf("model saw %+v", tr)
			}
			// No code ran and the container was not named: no container.
			if resp.Container != nil {
				t.Fatalf("container = %+v", resp.Container)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	svc := New(&fakeModel{}, Tools{}, Config{})
	tests := []struct {
		name string
		body string
		want string // error message, empty for success
	}{
		{"ok", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, ""},
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "max_tokens: must be at least 1"},
		{"no messages", `{"model":"m","max_tokens":5,"messages":[]}`, "messages: at least one message is required"},
		{"bad role", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, `messages.0.role: must be "user" or "assistant"`},
		{"misnamed", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code_execution_v1","name":"run"}]}`, `tools.0.name: the code_execution_v1 tool must be named "code_execution"`},
		{"sandbox misnamed", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"sandbox_v1","name":"shell"}]}`, `tools.0.name: a sandbox_v1 tool is named "sandbox" or one of sandbox_bash, repl_execute, exec_command, write_stdin, edit_file, bsl_check`},
		{"sandbox tool name taken", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"sandbox_v1","name":"sandbox"},{"name":"edit_file","input_schema":{"type":"object"}}]}`, `tools: "edit_file" is used twice or reserved`},
		{"schema missing", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f"}]}`, "tools.0.input_schema: required"},
		{"bad upload", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"!!"}]}]}`, "messages.0.content.0.file_id: not a file id of this server: invalid file id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req wire.Request
			if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
				t.Fatal(err)
			}
			p, err := svc.Validate(&req)
			if tc.want == "" {
				if err != nil || !p.CodeExecution || len(p.ServerTools) != 2 {
					t.Fatalf("plan %+v err %v", p, err)
				}
				return
			}
			if !fault.Is(err, fault.Invalid) || fault.MessageOf(err) != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestContainerUploadBecomesNote(t *testing.T) {
	model := &fakeModel{steps: []*StepResult{step(wire.StopEndTurn, text("ok"))}}
	svc := New(model, allTools(&fakeTools{}), Config{})
	id := "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y" // /mnt/user-data/uploads/sales.csv
	req := request(wire.ToolTypeCodeExecution2508, wire.Message{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockContainerUpload, FileID: id}, text("analyse")}})
	if _, err := svc.Create(context.Background(), req, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	got := model.reqs[0].Messages[0].Content[0]
	if got.Type != wire.BlockText || !strings.Contains(got.Text, "/mnt/user-data/uploads/sales.csv") {
		t.Fatalf("upload became %+v", got)
	}
}

func TestSinkErrorAndCancel(t *testing.T) {
	t.Run("sink error stops the turn", func(t *testing.T) {
		tools := &fakeTools{}
		model := &fakeModel{steps: []*StepResult{step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"ls"}`))}}
		gone := errors.New("client gone")
		n := 0
		err := New(model, allTools(tools), Config{}).Run(context.Background(), request(wire.ToolTypeCodeExecution2508, user("x")), RunOptions{}, SinkFunc(func(wire.Event) error {
			n++
			if n > 2 {
				return gone
			}
			return nil
		}))
		if !errors.Is(err, gone) || len(tools.calls) != 0 {
			t.Fatalf("err %v, calls %d", err, len(tools.calls))
		}
	})
	t.Run("cancel stops a running command", func(t *testing.T) {
		tools := &fakeTools{block: true}
		model := &fakeModel{steps: []*StepResult{step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"sleep"}`))}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := New(model, allTools(tools), Config{}).Create(ctx, request(wire.ToolTypeCodeExecution2508, user("x")), RunOptions{})
			done <- err
		}()
		for {
			tools.mu.Lock()
			started := len(tools.calls) > 0
			tools.mu.Unlock()
			if started {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
	t.Run("model error is returned without message_stop", func(t *testing.T) {
		model := &fakeModel{err: &UpstreamError{StatusCode: 529, Type: "overloaded_error", Message: "Overloaded"}}
		var last wire.Event
		err := New(model, Tools{}, Config{}).Run(context.Background(), request("", user("x")), RunOptions{}, SinkFunc(func(ev wire.Event) error { last = ev; return nil }))
		if err == nil || last.Type == wire.EventMessageStop {
			t.Fatalf("err %v last %s", err, last.Type)
		}
		status, body := ErrorStatus(err)
		if status != 502 || body.Type != "api_error" || body.Message != "Overloaded" {
			t.Fatalf("status %d body %+v", status, body)
		}
		if ev := ErrorEvent(err); ev.Type != wire.EventError || ev.Error.Type != "api_error" {
			t.Fatalf("error event %+v", ev)
		}
	})
}

func TestErrorStatus(t *testing.T) {
	tests := []struct {
		err    error
		status int
		typ    string
		kind   fault.Kind // what Fault keeps of it
	}{
		{ErrUpstreamUnavailable, 503, "api_error", fault.Unavailable},
		{&UpstreamError{StatusCode: 529, Type: "overloaded_error"}, 502, "api_error", fault.Upstream},
		{&UpstreamError{StatusCode: 429, Type: "rate_limit_error"}, 429, "rate_limit_error", fault.RateLimited},
		{&UpstreamError{StatusCode: 400, Type: "invalid_request_error"}, 400, "invalid_request_error", fault.Invalid},
		{&UpstreamError{StatusCode: 413, Type: "request_too_large"}, 413, "invalid_request_error", fault.TooLarge},
		{&UpstreamError{StatusCode: 404, Type: "not_found_error"}, 404, "invalid_request_error", fault.NotFound},
		{&UpstreamError{Type: "api_error"}, 502, "api_error", fault.Upstream},
		{fault.New(fault.Invalid, "bad"), 400, "invalid_request_error", fault.Invalid},
		{fmt.Errorf("step: %w", context.DeadlineExceeded), 504, "api_error", fault.Timeout},
		{errors.New("boom"), 500, "api_error", fault.Internal},
	}
	for _, tc := range tests {
		status, body := ErrorStatus(tc.err)
		if status != tc.status || body.Type != tc.typ {
			t.Errorf("%v: got %d %s, want %d %s", tc.err, status, body.Type, tc.status, tc.typ)
		}
		f := Fault(tc.err)
		if fault.KindOf(f) != tc.kind || fault.MessageOf(f) != body.Message {
			t.Errorf("%v: Fault is %s %q, want %s %q", tc.err, fault.KindOf(f), fault.MessageOf(f), tc.kind, body.Message)
		}
	}
}

// loopModel calls bash n times, then ends the turn; it answers at once so a
// benchmark measures only the loop.
type loopModel struct{ n int }

func (m loopModel) Step(ctx context.Context, req StepRequest) (*StepResult, error) {
	if (len(req.Messages)-1)/2 < m.n {
		return step(wire.StopToolUse, toolUse("t", wire.SubToolBash, `{"command":"true"}`)), nil
	}
	return step(wire.StopEndTurn, text("done")), nil
}

func (m loopModel) StreamStep(ctx context.Context, req StepRequest, emit func(StepEvent) error) (*StepResult, error) {
	r, _ := m.Step(ctx, req)
	for i, b := range r.Content {
		for _, ev := range blockEventsForStep(i, b) {
			if err := emit(ev); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

func blockEventsForStep(i int, b wire.ContentBlock) []StepEvent {
	var out []StepEvent
	for _, ev := range blockEvents(b) {
		se := StepEvent{Index: i}
		switch ev.Type {
		case wire.EventContentBlockStart:
			se.Kind, se.Block = StepBlockStart, *ev.ContentBlock
		case wire.EventContentBlockDelta:
			se.Kind, se.Delta = StepBlockDelta, *ev.Delta
		default:
			se.Kind = StepBlockStop
		}
		out = append(out, se)
	}
	return out
}

// BenchmarkLoopIteration measures the loop's own overhead per tool
// iteration (model and command time excluded: both answer at once), with
// every event encoded as JSON as the web layer would.
func BenchmarkLoopIteration(b *testing.B) {
	const iterations = 10
	for _, stream := range []bool{false, true} {
		name := "nonstream"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			svc := New(loopModel{n: iterations}, allTools(&fakeTools{}), Config{MaxToolIterations: iterations + 1})
			sink := SinkFunc(func(ev wire.Event) error {
				_, err := json.Marshal(ev)
				return err
			})
			b.ReportAllocs()
			for b.Loop() {
				req := request(wire.ToolTypeCodeExecution2508, user("go"))
				req.Stream = stream
				if err := svc.Run(context.Background(), req, RunOptions{}, sink); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/iterations, "µs/iteration")
		})
	}
}

func TestToolChoiceNamingCodeExecution(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"type":"tool","name":"code_execution"}`, `{"type":"any"}`},
		{`{"type":"tool","name":"code_execution","disable_parallel_tool_use":true}`, `{"disable_parallel_tool_use":true,"type":"any"}`},
		{`{"type":"tool","name":"get_weather"}`, `{"type":"tool","name":"get_weather"}`},
		{`{"type":"auto"}`, `{"type":"auto"}`},
	} {
		model := &fakeModel{steps: []*StepResult{step(wire.StopEndTurn, text("ok"))}}
		req := request(wire.ToolTypeCodeExecution2508, user("x"))
		req.ToolChoice = json.RawMessage(tc.in)
		if _, err := New(model, Tools{}, Config{}).Create(context.Background(), req, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := string(model.reqs[0].ToolChoice); got != tc.want {
			t.Fatalf("tool_choice %s became %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestEnvFuncOnFirstToolCall: EnvFunc runs once, at the first sub-tool call,
// and its variables follow Env in every call; a turn without sub-tool calls
// never runs it, and its failure fails the turn.
func TestEnvFuncOnFirstToolCall(t *testing.T) {
	calls := 0
	opts := RunOptions{ContainerID: "u1--box", Env: []string{"A=1"}, EnvFunc: func(context.Context) ([]string, error) {
		calls++
		return []string{"TOKEN=t"}, nil
	}}
	script := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, toolUse("toolu_a", wire.SubToolBash, `{"command":"ls"}`)),
			step(wire.StopToolUse, toolUse("toolu_b", wire.SubToolBash, `{"command":"pwd"}`)),
			step(wire.StopEndTurn, text("Done.")),
		}
	}
	_, _, tools, _ := runBoth(t, Config{}, script, request(wire.ToolTypeCodeExecution2508, user("go")), opts)
	if calls != 2 { // once per run: runBoth runs non-streaming and streaming
		t.Fatalf("EnvFunc called %d times over two turns", calls)
	}
	for _, c := range tools.calls {
		if !slices.Equal(c.Env, []string{"A=1", "TOKEN=t"}) {
			t.Fatalf("call env %v", c.Env)
		}
	}

	calls = 0
	runBoth(t, Config{}, func() []*StepResult { return []*StepResult{step(wire.StopEndTurn, text("hi"))} }, request(wire.ToolTypeCodeExecution2508, user("hi")), opts)
	if calls != 0 {
		t.Fatalf("EnvFunc called %d times without a tool call", calls)
	}

	failing := RunOptions{ContainerID: "u1--box", EnvFunc: func(context.Context) ([]string, error) { return nil, errors.New("store down") }}
	svc := New(&fakeModel{steps: script()}, allTools(&fakeTools{}), Config{})
	err := svc.Run(context.Background(), request(wire.ToolTypeCodeExecution2508, user("go")), failing, SinkFunc(func(wire.Event) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("run with a failing EnvFunc: %v", err)
	}
}

// TestPendingCallsBounded: a client-written history with many unanswered
// server calls runs at most MaxToolIterations of them; the rest are
// answered "not run".
func TestPendingCallsBounded(t *testing.T) {
	var blocks []wire.ContentBlock
	for i := range 5 {
		blocks = append(blocks, wire.ContentBlock{Type: wire.BlockServerToolUse, ID: fmt.Sprintf("srvtoolu_%d", i), Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"true"}`)})
	}
	blocks = append(blocks, wire.ContentBlock{Type: wire.BlockToolUse, ID: "toolu_client", Name: "get_weather", Input: json.RawMessage(`{}`)})
	req := request(wire.ToolTypeCodeExecution2508, user("go"),
		wire.Message{Role: wire.RoleAssistant, Content: blocks},
		wire.Message{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "toolu_client", Content: json.RawMessage(`"ok"`)}}})
	req.Tools = append(req.Tools, wire.Tool{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)})
	finish := func() []*StepResult { return []*StepResult{step(wire.StopEndTurn, text("done"))} }
	_, model, tools, _ := runBoth(t, Config{MaxToolIterations: 2}, finish, req, RunOptions{})
	if len(tools.calls) != 2 {
		t.Fatalf("%d pending calls ran, want 2", len(tools.calls))
	}
	sent, _ := json.Marshal(model.reqs[0].Messages)
	if n := strings.Count(string(sent), "at most 2 pending calls"); n != 3 {
		t.Fatalf("%d calls answered as not run, want 3: %s", n, sent)
	}
}

// fakeTokenMeter records the tokens metered, one string per step.
type fakeTokenMeter struct {
	mu    sync.Mutex
	steps []string
}

func (m *fakeTokenMeter) Tokens(ctx context.Context, orgID, userID, containerID string, input, output int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps = append(m.steps, fmt.Sprintf("%s/%s/%s in=%d out=%d", orgID, userID, containerID, input, output))
}

// TestTokensMeteredPerStep checks that the model tokens of every step are
// metered for the turn's user and container, streaming or not.
func TestTokensMeteredPerStep(t *testing.T) {
	script := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, toolUse("toolu_a", wire.SubToolBash, `{"command":"ls"}`)),
			step(wire.StopEndTurn, text("Done.")),
		}
	}
	m := &fakeTokenMeter{}
	opts := RunOptions{ContainerID: "u1--box", Container: testContainer, OrgID: "o1", UserID: "u1"}
	runBoth(t, Config{Tokens: m}, script, request(wire.ToolTypeCodeExecution2508, user("list files")), opts)
	want := "o1/u1/u1--box in=10 out=5"
	if len(m.steps) != 4 { // two steps, run twice (streaming and not)
		t.Fatalf("metered %v, want 4 steps", m.steps)
	}
	for _, s := range m.steps {
		if s != want {
			t.Fatalf("metered %v, want each %q", m.steps, want)
		}
	}
}

// allTools registers e for every tool family.
func allTools(e ToolExecutor) Tools { return Tools{CodeExecution: e, Sandbox: e} }
