package messages

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"threadbox/app/messages/wire"
)

// fakePython answers each code_execution cell with its code echoed, and a
// cell "boom" with an execution_time_exceeded error.
type fakePython struct {
	mu    sync.Mutex
	calls []ToolCall
}

func (f *fakePython) Execute(_ context.Context, call ToolCall) (*wire.ToolResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	var in struct{ Code string }
	_ = json.Unmarshal(call.Input, &in)
	if in.Code == "boom" {
		return ErrorResult(call.Name, wire.CodeExecutionTimeExceeded, "too long"), nil
	}
	return &wire.ToolResult{Type: wire.ResultCodeExecution, Stdout: "ran " + in.Code, Files: []wire.OutputFile{{Type: wire.ResultCodeExecutionOutput, FileID: "f1"}}}, nil
}

func TestPythonSubToolOffered(t *testing.T) {
	tests := []struct {
		toolType   string
		python     bool
		cellLimit  bool // the definition states the 90 s cell limit
		serverWant string
	}{
		{wire.ToolTypeCodeExecution2508, false, false, "bash_code_execution,text_editor_code_execution"},
		{wire.ToolTypeCodeExecution2601, true, false, "bash_code_execution,text_editor_code_execution,code_execution"},
		{wire.ToolTypeCodeExecution2605, true, true, "bash_code_execution,text_editor_code_execution,code_execution"},
	}
	for _, tc := range tests {
		t.Run(tc.toolType, func(t *testing.T) {
			model := &fakeModel{steps: []*StepResult{step(wire.StopEndTurn, text("hi"))}}
			svc := New(model, Tools{CodeExecution: &fakePython{}}, Config{})
			req := request(tc.toolType, user("hi"))
			p, err := svc.Validate(req)
			if err != nil || strings.Join(p.ServerTools, ",") != tc.serverWant {
				t.Fatalf("plan %+v err %v", p, err)
			}
			if _, err := svc.Create(context.Background(), req, RunOptions{ContainerID: "c1"}); err != nil {
				t.Fatal(err)
			}
			var python *ToolDefinition
			for i, d := range model.reqs[0].Tools {
				if d.Name == SubToolCodeExecution {
					python = &model.reqs[0].Tools[i]
				}
			}
			if (python != nil) != tc.python {
				t.Fatalf("model tools %+v", model.reqs[0].Tools)
			}
			if python != nil && strings.Contains(string(python.Raw), "90-second") != tc.cellLimit {
				t.Fatalf("definition %s", python.Raw)
			}
		})
	}
}

func TestPythonCellsInTheLoop(t *testing.T) {
	script := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, toolUse("toolu_a", SubToolCodeExecution, `{"code":"x = 41"}`)),
			step(wire.StopToolUse, toolUse("toolu_b", SubToolCodeExecution, `{"code":"boom"}`)),
			step(wire.StopEndTurn, text("done")),
		}
	}
	var shapes []string
	for _, stream := range []bool{false, true} {
		model := &fakeModel{steps: script()}
		tools := &fakePython{}
		req := request(wire.ToolTypeCodeExecution2601, user("go"))
		req.Stream = stream
		resp, err := New(model, Tools{CodeExecution: tools}, Config{}).Create(context.Background(), req, RunOptions{ContainerID: "c1", Container: testContainer})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(resp.Content)
		shapes = append(shapes, mask(string(body)))
		got := []string{}
		for _, b := range resp.Content {
			got = append(got, b.Type)
		}
		want := []string{wire.BlockServerToolUse, wire.BlockCodeExecutionResult, wire.BlockServerToolUse, wire.BlockCodeExecutionResult, wire.BlockText}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("blocks %v", got)
		}
		if resp.Content[0].Name != SubToolCodeExecution || resp.Content[1].ToolUseID != resp.Content[0].ID || len(tools.calls) != 2 {
			t.Fatalf("call %+v result %+v", resp.Content[0], resp.Content[1])
		}
		for _, want := range []string{
			`"type":"code_execution_tool_result","tool_use_id":"srvtoolu_X","content":{"type":"code_execution_result","stdout":"ran x = 41","stderr":"","return_code":0,"content":[{"type":"code_execution_output","file_id":"f1"}]}`,
			// Anthropic's versions show no detail.
			`"content":{"type":"code_execution_tool_result_error","error_code":"execution_time_exceeded"}}`,
		} {
			if !strings.Contains(shapes[len(shapes)-1], want) {
				t.Fatalf("response lacks %s:\n%s", want, shapes[len(shapes)-1])
			}
		}
		// The model read each result as a tool_result of its call.
		second := model.reqs[1].Messages
		last := second[len(second)-1].Content[0]
		if last.Type != wire.BlockToolResult || last.ToolUseID != resp.Content[0].ID || !strings.Contains(string(last.Content), "ran x = 41") {
			t.Fatalf("second model request ends in %+v", last)
		}
		if third := model.reqs[2].Messages; !third[len(third)-1].Content[0].IsError {
			t.Fatalf("the error result is not an error for the model: %+v", third[len(third)-1])
		}
	}
	if shapes[0] != shapes[1] {
		t.Fatalf("streaming and non-streaming differ:\n%s\n%s", shapes[0], shapes[1])
	}
}

func TestPythonResultInHistory(t *testing.T) {
	// A client sends back the previous response's blocks.
	raw := `[{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{"code":"x = 41"}},` +
		`{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"text","text":"set"}]`
	var blocks []wire.ContentBlock
	if err := json.Unmarshal([]byte(raw), &blocks); err != nil {
		t.Fatal(err)
	}
	if blocks[1].Result == nil || blocks[1].Result.Type != wire.ResultCodeExecution {
		t.Fatalf("result block %+v", blocks[1])
	}
	again, err := json.Marshal(blocks[1])
	if err != nil || !strings.Contains(string(again), `"content":{"type":"code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}`) {
		t.Fatalf("re-encoded %s %v", again, err)
	}
	got := shape(upstreamHistory([]wire.Message{user("go"), {Role: wire.RoleAssistant, Content: blocks}, user("again")}))
	if want := "user:[text] assistant:[tool_use(srvtoolu_1)] user:[tool_result(srvtoolu_1)] assistant:[text] user:[text]"; got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}
