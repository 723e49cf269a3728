package messages

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"threadbox/app/messages/wire"
)

func TestSandboxPlan(t *testing.T) {
	tests := []struct {
		name  string
		tools string
		want  []string
	}{
		{"all", `[{"type":"sandbox_v1","name":"sandbox"}]`, SandboxTools},
		{"one by name", `[{"type":"sandbox_v1","name":"edit_file"}]`, []string{ToolEditFile}},
		{"two by name, one twice", `[{"type":"sandbox_v1","name":"exec_command"},{"type":"sandbox_v1","name":"write_stdin"},{"type":"sandbox_v1","name":"exec_command"}]`, []string{ToolExecCommand, ToolWriteStdin}},
		{"beside code execution", `[{"type":"code_execution_20250825","name":"code_execution"},{"type":"sandbox_v1","name":"repl_execute"}]`, []string{wire.SubToolBash, wire.SubToolTextEditor, ToolReplExecute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req wire.Request
			body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":` + tc.tools + `}`
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatal(err)
			}
			p, err := plan(&req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Sandbox || !slices.Equal(p.ServerTools, tc.want) || len(p.ClientTools) != 0 {
				t.Fatalf("plan %+v, want server tools %v", p, tc.want)
			}
		})
	}
}

func TestSandboxToolRunsAsServerTool(t *testing.T) {
	input := json.RawMessage(`{"command":"echo hi"}`)
	model := &fakeModel{steps: []*StepResult{
		step(wire.StopToolUse, wire.ContentBlock{Type: wire.BlockToolUse, ID: "toolu_1", Name: ToolSandboxBash, Input: input}),
		step(wire.StopToolUse, wire.ContentBlock{Type: wire.BlockToolUse, ID: "toolu_2", Name: ToolEditFile, Input: json.RawMessage(`{"path":"x"}`)}),
		step(wire.StopEndTurn, text("done")),
	}}
	tools := &scriptedTools{results: []*wire.ToolResult{
		wire.SandboxResult(json.RawMessage(`{"type":"sandbox_bash_result","stdout":"hi\n","exit_code":0}`)),
		ErrorResult(ToolEditFile, wire.CodeInvalidToolInput, "old_str: required"),
	}}
	svc := New(model, allTools(tools), Config{})
	var req wire.Request
	if err := json.Unmarshal([]byte(`{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"go"}],"tools":[{"type":"sandbox_v1","name":"sandbox"}]}`), &req); err != nil {
		t.Fatal(err)
	}
	resp, err := svc.Create(context.Background(), &req, RunOptions{ContainerID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(resp.Content)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []map[string]any
	if err := json.Unmarshal(out, &blocks); err != nil {
		t.Fatal(err)
	}
	types := []string{}
	for _, b := range blocks {
		types = append(types, b["type"].(string))
	}
	want := []string{wire.BlockServerToolUse, wire.BlockSandboxResult, wire.BlockServerToolUse, wire.BlockSandboxResult, wire.BlockText}
	if !slices.Equal(types, want) {
		t.Fatalf("block types %v, want %v\n%s", types, want, out)
	}
	first := blocks[1]["content"].(map[string]any)
	if first["type"] != "sandbox_bash_result" || first["stdout"] != "hi\n" {
		t.Fatalf("bash result %v", first)
	}
	// The product's own tool type keeps the error detail.
	second := blocks[3]["content"].(map[string]any)
	if second["type"] != wire.ResultSandboxError || second["error_code"] != wire.CodeInvalidToolInput || second["detail"] == nil {
		t.Fatalf("error result %v", second)
	}
	if blocks[0]["id"] != blocks[1]["tool_use_id"] || !strings.HasPrefix(blocks[0]["id"].(string), "srvtoolu_") {
		t.Fatalf("ids %v / %v", blocks[0]["id"], blocks[1]["tool_use_id"])
	}
	// The model saw the sandbox tools, and the results as tool_result.
	if len(model.reqs) != 3 {
		t.Fatalf("%d model steps", len(model.reqs))
	}
	var names []string
	for _, d := range model.reqs[0].Tools {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, SandboxTools) {
		t.Fatalf("model tools %v", names)
	}
	last := model.reqs[2].Messages
	tr := last[len(last)-1].Content[0]
	if tr.Type != wire.BlockToolResult || !tr.IsError || !strings.Contains(string(tr.Content), "old_str: required") {
		t.Fatalf("last tool_result %+v", tr)
	}
	// The response parses back, result blocks included.
	var back wire.Response
	raw, _ := json.Marshal(resp)
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Content[1].Result == nil || string(back.Content[1].Result.Body) == "" || back.Content[3].Result.Type != wire.ResultSandboxError {
		t.Fatalf("round trip lost the results: %s", raw)
	}
}

// scriptedTools answers sub-tool calls with its results in order.
type scriptedTools struct {
	results []*wire.ToolResult
	calls   []ToolCall
}

func (f *scriptedTools) Execute(_ context.Context, call ToolCall) (*wire.ToolResult, error) {
	f.calls = append(f.calls, call)
	r := f.results[0]
	f.results = f.results[1:]
	return r, nil
}

// TestOwnToolsEncodedOnce: the product's tool definitions carry their
// Anthropic form, which says what their fields say.
func TestOwnToolsEncodedOnce(t *testing.T) {
	var names []string
	for n := range sandboxDefs {
		names = append(names, n)
	}
	defs := append(SubToolDefinitions(), SandboxToolDefinitions(names)...)
	if len(defs) != 2+len(sandboxDefs) {
		t.Fatalf("%d definitions", len(defs))
	}
	for _, d := range defs {
		var got struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if err := json.Unmarshal(d.Raw, &got); err != nil {
			t.Fatalf("%s: raw %q: %v", d.Name, d.Raw, err)
		}
		var schema, want any
		if json.Unmarshal(got.InputSchema, &schema) != nil || json.Unmarshal(d.InputSchema, &want) != nil {
			t.Fatalf("%s: schemas %s / %s", d.Name, got.InputSchema, d.InputSchema)
		}
		if got.Name != d.Name || got.Description != d.Description || d.Description == "" || !reflect.DeepEqual(schema, want) {
			t.Fatalf("%s: raw %s", d.Name, d.Raw)
		}
	}
}
