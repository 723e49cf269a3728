package workspace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/jsonfield"
	"threadbox/domain/org"
)

// codeExecutionTool is the tool the pipeline adds: the product's own type,
// whose error blocks carry detail.
var codeExecutionTool = wire.Tool{Type: wire.ToolTypeCodeExecutionV1, Name: "code_execution"}

// AskedTool is one entry of a turn's pgpt.tools: a tool name
// ("code_execution") or a Messages API tool spec.
type AskedTool struct {
	wire.Tool
}

// UnmarshalJSON accepts a name or a tool object.
func (a *AskedTool) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) > 0 && data[0] == '"':
		var name string
		if err := json.Unmarshal(data, &name); err != nil {
			return err
		}
		a.Tool = wire.Tool{Name: name}
		return nil
	case len(data) > 0 && data[0] != '{' && string(data) != "null":
		return &jsonfield.FieldError{Want: "a string or an object"}
	}
	return json.Unmarshal(data, &a.Tool)
}

// isCodeExecution reports whether t asks for code execution: by name or by
// one of the code-execution tool types.
func isCodeExecution(t wire.Tool) bool {
	switch t.Type {
	case wire.ToolTypeCodeExecutionV1, wire.ToolTypeCodeExecution2508,
		wire.ToolTypeCodeExecution2601, wire.ToolTypeCodeExecution2605:
		return true
	case "":
		return t.Name == "code_execution"
	}
	return false
}

// TurnTools applies the injection rules (docs/api.md, Workspace API) to a workspace
// turn: the tools asked for in pgpt.tools, plus code execution when the
// turn uses skills and the org's codeExecution feature is on; with the
// feature off every code-execution tool is removed, explicit ones included.
// It returns the tools to send and whether code execution is among them.
// Tools other than code execution are refused: the workspace has no client
// to hand tool calls back to.
func TurnTools(asked []AskedTool, usesSkills bool, policy org.Policy) ([]wire.Tool, bool, error) {
	allowed := policy.Allows(org.CodeExecution)
	want := usesSkills
	var out []wire.Tool
	var sandboxTools []wire.Tool
	for i, t := range asked {
		if st, ok := sandboxTool(t.Tool); ok {
			// The sandbox_v1 tools run code too: the same
			// feature gates them.
			if !slices.ContainsFunc(sandboxTools, func(x wire.Tool) bool { return x.Name == st.Name }) {
				sandboxTools = append(sandboxTools, st)
			}
			continue
		}
		if !isCodeExecution(t.Tool) {
			return nil, false, fault.Errorf(fault.Invalid, "pgpt.tools.%d: %q is not a workspace tool (only code_execution and the sandbox_v1 tools are)", i, toolLabel(t.Tool))
		}
		if len(out) > 0 {
			continue // asked for twice
		}
		want = true
		if t.Type == "" {
			t.Tool = codeExecutionTool
		}
		out = append(out, wire.Tool{Type: t.Type, Name: "code_execution"})
	}
	if !allowed {
		return nil, false, nil
	}
	if !want {
		return sandboxTools, false, nil
	}
	if len(out) == 0 {
		out = append(out, codeExecutionTool)
	}
	return append(out, sandboxTools...), true, nil
}

// sandboxTool recognises a sandbox_v1 tool asked for by spec or by name.
func sandboxTool(t wire.Tool) (wire.Tool, bool) {
	switch {
	case t.Type == wire.ToolTypeSandboxV1:
		return wire.Tool{Type: t.Type, Name: t.Name}, true
	case t.Type == "" && (t.Name == messages.SandboxToolName || messages.IsSandboxTool(t.Name)):
		return wire.Tool{Type: wire.ToolTypeSandboxV1, Name: t.Name}, true
	}
	return wire.Tool{}, false
}

func toolLabel(t wire.Tool) string {
	if t.Name != "" {
		return t.Name
	}
	return fmt.Sprintf("type %s", t.Type)
}
