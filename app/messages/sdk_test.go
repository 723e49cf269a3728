package messages

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/app/messages/wire"
)

// TestSDKParsesResponse checks that the official SDK reads every block of a
// response, and that accumulating the stream events gives the same message.
func TestSDKParsesResponse(t *testing.T) {
	model := &fakeModel{steps: []*StepResult{
		step(wire.StopToolUse, text("Checking."), toolUse("a", wire.SubToolBash, `{"command":"ls"}`),
			toolUse("b", wire.SubToolTextEditor, `{"command":"create","path":"x","file_text":"y"}`)),
		step(wire.StopEndTurn, text("Done.")),
	}}
	svc := New(model, allTools(&fakeTools{}), Config{})
	req := request(wire.ToolTypeCodeExecution2508, user("go"))
	req.Stream = true
	var events []wire.Event
	var c Collector
	err := svc.Run(context.Background(), req, RunOptions{Container: testContainer, ReportContainer: true}, SinkFunc(func(ev wire.Event) error {
		events = append(events, ev)
		return c.Send(ev)
	}))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(c.Response())
	if err != nil {
		t.Fatal(err)
	}
	var msg anthropic.Message
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("SDK cannot parse %s: %v", raw, err)
	}
	check := func(msg anthropic.Message) {
		t.Helper()
		if len(msg.Content) != 6 {
			t.Fatalf("SDK saw %d blocks in %s", len(msg.Content), raw)
		}
		if b := msg.Content[1].AsServerToolUse(); b.Name != "bash_code_execution" || b.ID == "" {
			t.Fatalf("server_tool_use = %+v", b)
		}
		if b := msg.Content[2].AsBashCodeExecutionToolResult(); b.Content.Stdout != "ran ls" || b.ToolUseID != msg.Content[1].ID {
			t.Fatalf("bash result = %+v", b)
		}
		if b := msg.Content[4].AsTextEditorCodeExecutionToolResult(); b.Content.Type != "text_editor_code_execution_create_result" {
			t.Fatalf("editor result = %+v", b)
		}
		if msg.StopReason != anthropic.StopReasonEndTurn || msg.Container.ID != "my-box" || msg.Usage.ServerToolUse.JSON.ExtraFields["code_execution_requests"].Raw() != "2" {
			t.Fatalf("stop %q container %+v usage %+v", msg.StopReason, msg.Container, msg.Usage)
		}
	}
	check(msg)

	var acc anthropic.Message
	for _, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var sev anthropic.MessageStreamEventUnion
		if err := json.Unmarshal(b, &sev); err != nil {
			t.Fatalf("SDK cannot parse event %s: %v", b, err)
		}
		if err := acc.Accumulate(sev); err != nil {
			t.Fatalf("accumulate %s: %v", b, err)
		}
	}
	check(acc)
}

// pythonCells answers a Python cell with what it would print.
type pythonCells struct{ calls []ToolCall }

func (p *pythonCells) Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	p.calls = append(p.calls, call)
	return &wire.ToolResult{Type: wire.ResultCodeExecution, Stdout: "42\n", Files: []wire.OutputFile{{Type: wire.ResultCodeExecutionOutput, FileID: "file_out"}}}, nil
}

// TestSDKLegacyPythonTool checks that code_execution_20250522, sent as the
// official SDK builds it, runs as the Python-only tool it was: the model
// gets the code_execution tool without bash or the text editor, a bash
// call of the model is not run here, and the result block reads through
// the SDK's code_execution_tool_result types.
func TestSDKLegacyPythonTool(t *testing.T) {
	params := anthropic.MessageNewParams{
		Model: "default", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("compute"))},
		Tools:    []anthropic.ToolUnionParam{{OfCodeExecutionTool20250522: &anthropic.CodeExecutionTool20250522Param{}}},
	}
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	var req wire.Request
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	model := &fakeModel{steps: []*StepResult{
		step(wire.StopToolUse, toolUse("a", SubToolCodeExecution, `{"code":"print(6*7)"}`)),
		step(wire.StopEndTurn, text("42.")),
	}}
	cells := &pythonCells{}
	resp, err := New(model, allTools(cells), Config{}).Create(context.Background(), &req, RunOptions{Container: testContainer})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range model.reqs[0].Tools {
		names = append(names, d.Name)
	}
	if len(names) != 1 || names[0] != SubToolCodeExecution {
		t.Fatalf("the model was given %v", names)
	}
	if len(cells.calls) != 1 || cells.calls[0].Name != SubToolCodeExecution || len(cells.calls[0].CodeTools) != 0 {
		t.Fatalf("calls %+v", cells.calls)
	}
	raw, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var msg anthropic.Message
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("SDK cannot parse %s: %v", raw, err)
	}
	if len(msg.Content) != 3 {
		t.Fatalf("blocks %s", raw)
	}
	if b := msg.Content[0].AsServerToolUse(); b.Name != "code_execution" || b.Input.(map[string]any)["code"] != "print(6*7)" {
		t.Fatalf("server_tool_use %s", msg.Content[0].RawJSON())
	}
	r := msg.Content[1].AsCodeExecutionToolResult()
	res := r.Content.AsResponseCodeExecutionResultBlock()
	if r.ToolUseID != msg.Content[0].ID || res.Type != "code_execution_result" || res.Stdout != "42\n" || res.ReturnCode != 0 ||
		len(res.Content) != 1 || res.Content[0].FileID != "file_out" || res.Content[0].Type != "code_execution_output" {
		t.Fatalf("result %s", msg.Content[1].RawJSON())
	}

	// bash_code_execution is no server tool of this version: a model's
	// call of it goes to the client, as a client tool's would.
	model = &fakeModel{steps: []*StepResult{step(wire.StopToolUse, toolUse("b", wire.SubToolBash, `{"command":"ls"}`))}}
	cells = &pythonCells{}
	if resp, err = New(model, allTools(cells), Config{}).Create(context.Background(), &req, RunOptions{Container: testContainer}); err != nil {
		t.Fatal(err)
	}
	if len(cells.calls) != 0 || resp.StopReason != wire.StopToolUse || resp.Content[0].Type != wire.BlockToolUse {
		t.Fatalf("calls %+v, response %+v", cells.calls, resp)
	}
}

// TestSDKDirectCaller checks that the blocks of calls the model made
// itself carry caller {"type": "direct"}, as the official SDK types every
// tool_use and server_tool_use, streamed or not, and that the caller goes
// no further than the client: the history sent back reaches the model
// without it.
func TestSDKDirectCaller(t *testing.T) {
	weather := wire.Tool{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)}
	for _, stream := range []bool{false, true} {
		model := &fakeModel{steps: []*StepResult{
			step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"ls"}`)),
			step(wire.StopToolUse, toolUse("toolu_w", "get_weather", `{}`)),
			step(wire.StopEndTurn, text("Sunny.")),
		}}
		req := request(wire.ToolTypeCodeExecution2508, user("go"))
		req.Tools = append(req.Tools, weather)
		req.Stream = stream
		svc := New(model, allTools(&fakeTools{}), Config{})
		resp, err := svc.Create(context.Background(), req, RunOptions{Container: testContainer})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var msg anthropic.Message
		if err := json.Unmarshal(raw, &msg); err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 3 || msg.Content[0].AsServerToolUse().Caller.Type != "direct" || msg.Content[2].AsToolUse().Caller.Type != "direct" {
			t.Fatalf("stream %v: %s", stream, raw)
		}
		// The client sends the response back with its tool's result.
		var next wire.Request
		body, _ := json.Marshal(map[string]any{"model": "default", "max_tokens": 100, "tools": req.Tools, "messages": []any{
			user("go"), json.RawMessage(`{"role":"assistant","content":` + string(mustJSON(t, resp.Content)) + `}`),
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_w", "content": "sunny"}}},
		}})
		if err := json.Unmarshal(body, &next); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Create(context.Background(), &next, RunOptions{Container: testContainer}); err != nil {
			t.Fatal(err)
		}
		last := model.reqs[len(model.reqs)-1]
		sent, _ := wire.MarshalMessages(last.Messages)
		if bytes.Contains(sent, []byte("caller")) {
			t.Fatalf("the model was sent callers: %s", sent)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pausingCells pauses every cell on one call of get_weather, waiting for
// the client's result until until.
type pausingCells struct{ until time.Time }

func (p pausingCells) Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	return &wire.ToolResult{Type: wire.ResultCodeExecution, Files: []wire.OutputFile{},
		Pending: []wire.PendingCall{{ID: "toolu_w", Name: "get_weather", Input: json.RawMessage(`{}`)}}, PausedUntil: p.until}, nil
}

// TestSDKPausedExpiry checks that a response paused on calls from code
// gives, as its container's expires_at, when the paused cell stops waiting
// for the client's results, where that comes before the container's
// expiry; the container's own expiry otherwise.
func TestSDKPausedExpiry(t *testing.T) {
	containerExpiry := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		until time.Time
		want  time.Time
	}{
		{"the cell's deadline first", time.Date(2029, 6, 1, 12, 0, 30, 500, time.UTC), time.Date(2029, 6, 1, 12, 0, 30, 0, time.UTC)},
		{"the container's expiry first", time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), containerExpiry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			weather := wire.Tool{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`), AllowedCallers: []string{wire.ToolTypeCodeExecution2601}}
			req := request(wire.ToolTypeCodeExecution2601, user("go"))
			req.Tools = append(req.Tools, weather)
			model := &fakeModel{steps: []*StepResult{step(wire.StopToolUse, toolUse("a", SubToolCodeExecution, `{"code":"await get_weather()"}`))}}
			resp, err := New(model, allTools(pausingCells{tc.until}), Config{}).Create(context.Background(), req,
				RunOptions{Container: &wire.Container{ID: "my-box", ExpiresAt: containerExpiry}, ReportContainer: true})
			if err != nil {
				t.Fatal(err)
			}
			var msg anthropic.Message
			if err := json.Unmarshal(mustJSON(t, resp), &msg); err != nil {
				t.Fatal(err)
			}
			if msg.StopReason != anthropic.StopReasonToolUse || !msg.Container.ExpiresAt.Equal(tc.want) {
				t.Fatalf("stop %q, expires_at %v, want %v", msg.StopReason, msg.Container.ExpiresAt, tc.want)
			}
		})
	}
}
