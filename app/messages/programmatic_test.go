package messages

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestProgrammaticPlan(t *testing.T) {
	schema := json.RawMessage(`{"type":"object"}`)
	code := func(typ string) Tool { return Tool{Type: typ, Name: "code_execution"} }
	client := func(name string, callers ...string) Tool {
		return Tool{Name: name, InputSchema: schema, AllowedCallers: callers}
	}
	user := []Message{{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "hi"}}}}
	tests := []struct {
		name  string
		tools []Tool
		want  []string // programmatic tools; nil: a 400 containing err
		err   string
	}{
		{"code only", []Tool{code(ToolTypeCodeExecution2601), client("a", "code_execution_20260120")}, []string{"a"}, ""},
		{"either 2026 version", []Tool{client("a", "code_execution_20260120"), code(ToolTypeCodeExecution2605), client("b", "direct", "code_execution_20260521")}, []string{"a", "b"}, ""},
		{"direct only", []Tool{code(ToolTypeCodeExecution2601), client("a", "direct"), client("b")}, []string{}, ""},
		{"no code execution", []Tool{client("a", "code_execution_20260120")}, nil, "tools.0.allowed_callers: the tool can be called only from code"},
		{"20250825 runs no Python", []Tool{code(ToolTypeCodeExecution2508), client("a", "code_execution_20250825")}, nil, "tools.1.allowed_callers"},
		{"direct beside an unusable caller", []Tool{client("a", "direct", "code_execution_20260120")}, []string{}, ""},
		{"unknown caller", []Tool{code(ToolTypeCodeExecution2601), client("a", "someone")}, nil, `tools.1.allowed_callers.0: "someone" is not one of`},
		{"empty", []Tool{code(ToolTypeCodeExecution2601), {Name: "a", InputSchema: schema, AllowedCallers: []string{}}}, nil, "tools.1.allowed_callers: must not be empty"},
	}
	forced := &Request{MaxTokens: 10, Messages: user, Tools: []Tool{code(ToolTypeCodeExecution2601), client("a", "code_execution_20260120")}, ToolChoice: json.RawMessage(`{"type":"tool","name":"a"}`)}
	if _, err := plan(forced, nil); err == nil || !strings.Contains(err.Error(), `tool_choice: "a" can be called only from code`) {
		t.Errorf("tool_choice forcing a tool only code calls: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plan(&Request{MaxTokens: 10, Messages: user, Tools: tc.tools}, nil)
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
	caller := &Caller{Type: CallerType, ToolID: "srvtoolu_1"}
	result := func(id, text string) ContentBlock {
		c, _ := json.Marshal(text)
		return ContentBlock{Type: BlockToolResult, ToolUseID: id, Content: c}
	}
	in := []Message{
		{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "go"}}},
		{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockServerToolUse, ID: "srvtoolu_1", Name: SubToolCodeExecution}, {Type: BlockToolUse, ID: "toolu_a", Name: "f", Caller: caller}}},
		{Role: RoleUser, Content: []ContentBlock{result("toolu_a", "A")}},
		{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockToolUse, ID: "toolu_b", Name: "f", Caller: caller}, {Type: BlockToolUse, ID: "toolu_c", Name: "f", Caller: caller}}},
		{Role: RoleUser, Content: []ContentBlock{result("toolu_b", "B"), result("toolu_c", "C")}},
	}
	out, resume, callers := stripProgrammatic(in)
	if len(out) != 2 || out[1].Role != RoleAssistant || len(out[1].Content) != 1 || out[1].Content[0].ID != "srvtoolu_1" {
		t.Fatalf("history %+v", out)
	}
	got := resume["srvtoolu_1"]
	if len(resume) != 1 || len(got) != 2 || got[0].ToolUseID != "toolu_b" || string(got[1].Content) != `"C"` || !callers["srvtoolu_1"] {
		t.Fatalf("resume %+v, callers %v", resume, callers)
	}
}

func TestProgrammaticHistoryRules(t *testing.T) {
	caller := &Caller{Type: CallerType, ToolID: "srvtoolu_1"}
	history := func(answer ...ContentBlock) []Message {
		return []Message{
			{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "go"}}},
			{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockServerToolUse, ID: "srvtoolu_1", Name: SubToolCodeExecution}, {Type: BlockToolUse, ID: "toolu_a", Name: "f", Caller: caller}}},
			{Role: RoleUser, Content: answer},
		}
	}
	res := ContentBlock{Type: BlockToolResult, ToolUseID: "toolu_a", Content: json.RawMessage(`"x"`)}
	box := &ContainerParam{ID: "box"}
	for _, tc := range []struct {
		name      string
		req       Request
		wantError string
	}{
		{"answered", Request{Messages: history(res), Container: box}, ""},
		{"text beside", Request{Messages: history(res, ContentBlock{Type: BlockText, Text: "more"}), Container: box}, "holds only tool_result blocks"},
		{"unanswered", Request{Messages: history(ContentBlock{Type: BlockText, Text: "other"}), Container: box}, "holds only tool_result blocks"},
		{"no container", Request{Messages: history(res)}, "container_id is required"},
	} {
		err := programmaticHistory(&tc.req)
		if (err == nil) != (tc.wantError == "") || err != nil && !strings.Contains(err.Error(), tc.wantError) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantError)
		}
	}
}
