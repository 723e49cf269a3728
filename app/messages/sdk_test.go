package messages

import (
	"context"
	"encoding/json"
	"testing"

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

func (p *pythonCells) Execute(ctx context.Context, call ToolCall) (*ToolResult, error) {
	p.calls = append(p.calls, call)
	return &ToolResult{Type: wire.ResultCodeExecution, Stdout: "42\n", Files: []wire.OutputFile{{Type: wire.ResultCodeExecutionOutput, FileID: "file_out"}}}, nil
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
	model = &fakeModel{steps: []*StepResult{step(wire.StopToolUse, toolUse("b", SubToolBash, `{"command":"ls"}`))}}
	cells = &pythonCells{}
	if resp, err = New(model, allTools(cells), Config{}).Create(context.Background(), &req, RunOptions{Container: testContainer}); err != nil {
		t.Fatal(err)
	}
	if len(cells.calls) != 0 || resp.StopReason != wire.StopToolUse || resp.Content[0].Type != wire.BlockToolUse {
		t.Fatalf("calls %+v, response %+v", cells.calls, resp)
	}
}
