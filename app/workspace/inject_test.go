package workspace

import (
	"encoding/json"
	"slices"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/org"
)

func TestTurnToolsInjectionRules(t *testing.T) {
	on := org.DefaultPolicy()
	f := false
	off, err := on.Patch(org.PolicyPatch{CodeExecution: &f})
	if err != nil {
		t.Fatal(err)
	}
	asked := func(js string) []AskedTool {
		var a []AskedTool
		if err := json.Unmarshal([]byte(js), &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	cases := []struct {
		name     string
		asked    []AskedTool
		skills   bool
		policy   org.Policy
		wantCode bool
		wantType string
		wantErr  bool
	}{
		{"plain turn gets no tools", nil, false, on, false, "", false},
		{"skills with the feature on add code execution", nil, true, on, true, wire.ToolTypeCodeExecutionV1, false},
		{"skills with the feature off add nothing", nil, true, off, false, "", false},
		{"asked by name", asked(`["code_execution"]`), false, on, true, wire.ToolTypeCodeExecutionV1, false},
		{"asked by Anthropic type keeps the type", asked(`[{"type":"code_execution_20250825","name":"code_execution"}]`), false, on, true, wire.ToolTypeCodeExecution2508, false},
		{"asked and skills give one tool", asked(`["code_execution",{"type":"code_execution_v1","name":"code_execution"}]`), true, on, true, wire.ToolTypeCodeExecutionV1, false},
		{"explicit request removed when the feature is off", asked(`["code_execution"]`), false, off, false, "", false},
		{"explicit typed request removed when off", asked(`[{"type":"code_execution_20260120","name":"code_execution"}]`), true, off, false, "", false},
		{"other tools refused", asked(`[{"name":"get_weather","input_schema":{"type":"object"}}]`), false, on, false, "", true},
		{"unknown name refused", asked(`["web_search"]`), false, on, false, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tools, code, err := TurnTools(tc.asked, tc.skills, tc.policy)
			if tc.wantErr {
				if !fault.Is(err, fault.Invalid) {
					t.Fatalf("want invalid, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Fatalf("code execution = %v, want %v (tools %+v)", code, tc.wantCode, tools)
			}
			if !tc.wantCode {
				if len(tools) != 0 {
					t.Fatalf("tools %+v, want none", tools)
				}
				return
			}
			if len(tools) != 1 || tools[0].Type != tc.wantType || tools[0].Name != "code_execution" {
				t.Fatalf("tools %+v, want one %s", tools, tc.wantType)
			}
			// The Messages loop accepts what the rules produce.
			req := &wire.Request{MaxTokens: 1, Tools: tools, Messages: []wire.Message{{Role: "user", Content: []wire.ContentBlock{{Type: "text", Text: "x"}}}}}
			p, err := messages.New(nil, messages.Tools{}, messages.Config{}).Validate(req)
			if err != nil || !p.CodeExecution {
				t.Fatalf("plan: %+v %v", p, err)
			}
		})
	}
}

func TestTurnToolsSandboxTools(t *testing.T) {
	on := org.DefaultPolicy()
	f := false
	off, err := on.Patch(org.PolicyPatch{CodeExecution: &f})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		asked     string
		skills    bool
		policy    org.Policy
		wantNames []string
		wantCode  bool
	}{
		{"by spec", `[{"type":"sandbox_v1","name":"sandbox"}]`, false, on, []string{"sandbox"}, false},
		{"by tool name, twice", `["repl_execute","edit_file","repl_execute"]`, false, on, []string{"repl_execute", "edit_file"}, false},
		{"beside code execution", `["code_execution","sandbox"]`, false, on, []string{"code_execution", "sandbox"}, true},
		{"skills add code execution first", `["exec_command"]`, true, on, []string{"code_execution", "exec_command"}, true},
		{"removed when the feature is off", `[{"type":"sandbox_v1","name":"sandbox"}]`, false, off, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var asked []AskedTool
			if err := json.Unmarshal([]byte(tc.asked), &asked); err != nil {
				t.Fatal(err)
			}
			tools, code, err := TurnTools(asked, tc.skills, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools {
				names = append(names, tl.Name)
			}
			if code != tc.wantCode || !slices.Equal(names, tc.wantNames) {
				t.Fatalf("tools %v code %v, want %v %v", names, code, tc.wantNames, tc.wantCode)
			}
			if len(tools) == 0 {
				return
			}
			req := &wire.Request{MaxTokens: 1, Tools: tools, Messages: []wire.Message{{Role: "user", Content: []wire.ContentBlock{{Type: "text", Text: "x"}}}}}
			p, err := messages.New(nil, messages.Tools{}, messages.Config{}).Validate(req)
			if err != nil || !p.Sandbox || p.CodeExecution != tc.wantCode {
				t.Fatalf("plan: %+v %v", p, err)
			}
		})
	}
}
