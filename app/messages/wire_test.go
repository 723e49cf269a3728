package messages

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// TestSDKParsesResponse checks that the official SDK reads every block of a
// response, and that accumulating the stream events gives the same message.
func TestSDKParsesResponse(t *testing.T) {
	model := &fakeModel{steps: []*StepResult{
		step(StopToolUse, text("Checking."), toolUse("a", SubToolBash, `{"command":"ls"}`),
			toolUse("b", SubToolTextEditor, `{"command":"create","path":"x","file_text":"y"}`)),
		step(StopEndTurn, text("Done.")),
	}}
	svc := New(model, &fakeTools{}, Config{})
	req := request(ToolTypeCodeExecution2508, user("go"))
	req.Stream = true
	var events []Event
	var c Collector
	err := svc.Run(context.Background(), req, RunOptions{Container: testContainer, ReportContainer: true}, SinkFunc(func(ev Event) error {
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

func TestRequestRoundTrip(t *testing.T) {
	body := `{"model":"default","max_tokens":10,"container":"box","temperature":0.5,"service_tier":"auto",` +
		`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},` +
		`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"a","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"web_search_tool_result","tool_use_id":"x","content":[]}]}]}`
	var r Request
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Container == nil || r.Container.ID != "box" || string(r.Extra["service_tier"]) != `"auto"` {
		t.Fatalf("request = %+v", r)
	}
	if got := r.Messages[0].Content[0]; got.Type != BlockText || got.Text != "hi" {
		t.Fatalf("string content = %+v", got)
	}
	res := r.Messages[1].Content[1].Result
	if res == nil || res.Stdout != "a" || res.Files == nil {
		t.Fatalf("result = %+v", res)
	}
	out, err := json.Marshal(r.Messages[1])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},` +
		`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"a","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"web_search_tool_result","tool_use_id":"x","content":[]}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	var obj ContainerParam
	if err := json.Unmarshal([]byte(`{"id":"b","skills":[{"type":"custom","skill_id":"s1","version":"latest"}]}`), &obj); err != nil || obj.ID != "b" || obj.Skills[0].SkillID != "s1" {
		t.Fatalf("container object = %+v, %v", obj, err)
	}
}
