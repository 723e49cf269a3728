package messages

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"threadbox/app/messages/wire"
)

func TestProgrammaticPlan(t *testing.T) {
	schema := json.RawMessage(`{"type":"object"}`)
	code := func(typ string) wire.Tool { return wire.Tool{Type: typ, Name: "code_execution"} }
	client := func(name string, callers ...string) wire.Tool {
		return wire.Tool{Name: name, InputSchema: schema, AllowedCallers: callers}
	}
	user := []wire.Message{{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "hi"}}}}
	tests := []struct {
		name  string
		tools []wire.Tool
		want  []string // programmatic tools; nil: a 400 containing err
		err   string
	}{
		{"code only", []wire.Tool{code(wire.ToolTypeCodeExecution2601), client("a", "code_execution_20260120")}, []string{"a"}, ""},
		{"either 2026 version", []wire.Tool{client("a", "code_execution_20260120"), code(wire.ToolTypeCodeExecution2605), client("b", "direct", "code_execution_20260521")}, []string{"a", "b"}, ""},
		{"direct only", []wire.Tool{code(wire.ToolTypeCodeExecution2601), client("a", "direct"), client("b")}, []string{}, ""},
		{"no code execution", []wire.Tool{client("a", "code_execution_20260120")}, nil, "tools.0.allowed_callers: the tool can be called only from code"},
		{"20250825 runs no Python", []wire.Tool{code(wire.ToolTypeCodeExecution2508), client("a", "code_execution_20250825")}, nil, "tools.1.allowed_callers"},
		{"direct beside an unusable caller", []wire.Tool{client("a", "direct", "code_execution_20260120")}, []string{}, ""},
		{"unknown caller", []wire.Tool{code(wire.ToolTypeCodeExecution2601), client("a", "someone")}, nil, `tools.1.allowed_callers.0: "someone" is not one of`},
		{"empty", []wire.Tool{code(wire.ToolTypeCodeExecution2601), {Name: "a", InputSchema: schema, AllowedCallers: []string{}}}, nil, "tools.1.allowed_callers: must not be empty"},
	}
	forced := &wire.Request{MaxTokens: 10, Messages: user, Tools: []wire.Tool{code(wire.ToolTypeCodeExecution2601), client("a", "code_execution_20260120")}, ToolChoice: json.RawMessage(`{"type":"tool","name":"a"}`)}
	if _, err := plan(forced, nil); err == nil || !strings.Contains(err.Error(), `tool_choice: "a" can be called only from code`) {
		t.Errorf("tool_choice forcing a tool only code calls: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plan(&wire.Request{MaxTokens: 10, Messages: user, Tools: tc.tools}, nil)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(p.ProgrammaticTools, tc.want) {
				t.Fatalf("programmatic tools %v, %v; want %v", p, err, tc.want)
			}
		})
	}
}

// TestStripProgrammatic: the calls code made and their results leave the
// history the model gets, the assistant messages they split are one
// again, and only the last message's results resume the cell.
func TestStripProgrammatic(t *testing.T) {
	caller := &wire.Caller{Type: CallerType, ToolID: "srvtoolu_1"}
	result := func(id, text string) wire.ContentBlock {
		c, _ := json.Marshal(text)
		return wire.ContentBlock{Type: wire.BlockToolResult, ToolUseID: id, Content: c}
	}
	in := []wire.Message{
		{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "go"}}},
		{Role: wire.RoleAssistant, Content: []wire.ContentBlock{{Type: wire.BlockServerToolUse, ID: "srvtoolu_1", Name: SubToolCodeExecution}, {Type: wire.BlockToolUse, ID: "toolu_a", Name: "f", Caller: caller}}},
		{Role: wire.RoleUser, Content: []wire.ContentBlock{result("toolu_a", "A")}},
		{Role: wire.RoleAssistant, Content: []wire.ContentBlock{{Type: wire.BlockToolUse, ID: "toolu_b", Name: "f", Caller: caller}, {Type: wire.BlockToolUse, ID: "toolu_c", Name: "f", Caller: caller}}},
		{Role: wire.RoleUser, Content: []wire.ContentBlock{result("toolu_b", "B"), result("toolu_c", "C")}},
	}
	out, resume, callers := stripProgrammatic(in)
	if len(out) != 2 || out[1].Role != wire.RoleAssistant || len(out[1].Content) != 1 || out[1].Content[0].ID != "srvtoolu_1" {
		t.Fatalf("history %+v", out)
	}
	got := resume["srvtoolu_1"]
	if len(resume) != 1 || len(got) != 2 || got[0].ToolUseID != "toolu_b" || string(got[1].Content) != `"C"` || !callers["srvtoolu_1"] {
		t.Fatalf("resume %+v, callers %v", resume, callers)
	}
}

func TestProgrammaticHistoryRules(t *testing.T) {
	caller := &wire.Caller{Type: CallerType, ToolID: "srvtoolu_1"}
	history := func(answer ...wire.ContentBlock) []wire.Message {
		return []wire.Message{
			{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "go"}}},
			{Role: wire.RoleAssistant, Content: []wire.ContentBlock{{Type: wire.BlockServerToolUse, ID: "srvtoolu_1", Name: SubToolCodeExecution}, {Type: wire.BlockToolUse, ID: "toolu_a", Name: "f", Caller: caller}}},
			{Role: wire.RoleUser, Content: answer},
		}
	}
	res := wire.ContentBlock{Type: wire.BlockToolResult, ToolUseID: "toolu_a", Content: json.RawMessage(`"x"`)}
	box := &wire.ContainerParam{ID: "box"}
	for _, tc := range []struct {
		name      string
		req       wire.Request
		wantError string
	}{
		{"answered", wire.Request{Messages: history(res), Container: box}, ""},
		{"text beside", wire.Request{Messages: history(res, wire.ContentBlock{Type: wire.BlockText, Text: "more"}), Container: box}, "holds only tool_result blocks"},
		{"unanswered", wire.Request{Messages: history(wire.ContentBlock{Type: wire.BlockText, Text: "other"}), Container: box}, "holds only tool_result blocks"},
		{"no container", wire.Request{Messages: history(res)}, "container_id is required"},
	} {
		err := programmaticHistory(&tc.req)
		if (err == nil) != (tc.wantError == "") || err != nil && !strings.Contains(err.Error(), tc.wantError) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantError)
		}
	}
}
