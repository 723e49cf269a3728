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
