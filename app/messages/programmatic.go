package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

// Programmatic tool calling (docs/messages.md, "Programmatic tool
// calling"). Under code_execution_20260120 and later, a client tool whose
// allowed_callers lists the request's code-execution tool type is an async
// function of the code_execution sub-tool's Python. Awaiting it pauses the
// cell; the response carries, after the cell's server_tool_use, one
// tool_use block per call with its caller
//
//	{"type":"tool_use","id":"toolu_…","name":"get_weather","input":{…},
//	 "caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_…"}}
//
// and ends with stop_reason "tool_use". The client answers with a user
// message of tool_result blocks only, with the same container; the cell
// goes on with the results, and the turn with the cell's result. The
// model never sees these calls: its history holds the cell and its final
// result.

// callerDirect and the code-execution tool types are the values
// allowed_callers takes.
var allowedCallerValues = []string{wire.CallerDirect, wire.ToolTypeCodeExecution2508, wire.ToolTypeCodeExecution2601, wire.ToolTypeCodeExecution2605}

// callers returns a client tool's allowed_callers, "direct" when it names
// none.
func callers(t wire.Tool) []string {
	if len(t.AllowedCallers) == 0 {
		return []string{wire.CallerDirect}
	}
	return t.AllowedCallers
}

// directTool reports whether the model may call the client tool itself.
func directTool(t wire.Tool) bool { return slices.Contains(callers(t), wire.CallerDirect) }

// codeCallable reports whether code run by the code-execution tool of
// toolType may call the client tool. code_execution_20260120 and
// code_execution_20260521 are one environment, so either in
// allowed_callers serves both.
func codeCallable(t wire.Tool, toolType string) bool {
	if !CallsFromCode(toolType) {
		return false
	}
	for _, c := range callers(t) {
		if CallsFromCode(c) {
			return true
		}
	}
	return false
}

// checkAllowedCallers checks the allowed_callers of tool i, a client tool.
func checkAllowedCallers(i int, t wire.Tool) error {
	if t.AllowedCallers != nil && len(t.AllowedCallers) == 0 {
		return fault.Errorf(fault.Invalid, "tools.%d.allowed_callers: must not be empty", i)
	}
	for j, c := range t.AllowedCallers {
		if !slices.Contains(allowedCallerValues, c) {
			return fault.Errorf(fault.Invalid, "tools.%d.allowed_callers.%d: %q is not one of %s", i, j, c, strings.Join(allowedCallerValues, ", "))
		}
	}
	return nil
}

// checkCallers checks, once the request's code-execution tool is known,
// that each client tool has a caller the request enables, and lists those
// code may call.
func checkCallers(req *wire.Request, p *Plan) error {
	for i, t := range req.Tools {
		if isCodeExecutionType(t.Type) || t.Type == wire.ToolTypeSandboxV1 || len(t.AllowedCallers) == 0 {
			continue
		}
		if codeCallable(t, p.ToolType) {
			p.ProgrammaticTools = append(p.ProgrammaticTools, t.Name)
			continue
		}
		if !directTool(t) {
			return fault.Errorf(fault.Invalid, "tools.%d.allowed_callers: the tool can be called only from code, which needs a code_execution_20260120 or code_execution_20260521 tool in tools", i)
		}
	}
	// A tool only code calls cannot be forced on the model.
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if len(req.ToolChoice) > 0 && json.Unmarshal(req.ToolChoice, &tc) == nil && tc.Type == "tool" {
		for _, t := range req.Tools {
			if t.Name == tc.Name && !isCodeExecutionType(t.Type) && t.Type != wire.ToolTypeSandboxV1 && !directTool(t) {
				return fault.Errorf(fault.Invalid, "tool_choice: %q can be called only from code (its allowed_callers lacks \"direct\"), so the model cannot be made to call it", tc.Name)
			}
		}
	}
	return nil
}

// programmaticHistory finds the programmatic tool calls of a history: the
// tool_use blocks with a caller (in assistant messages) and the
// tool_result blocks answering them. It checks the rules Anthropic
// documents: the calls of the last assistant message are all answered by
// the user message that follows, which holds nothing but tool_result
// blocks, in a request that names its container.
func programmaticHistory(req *wire.Request) error {
	calls := map[string]bool{}
	for i, m := range req.Messages {
		var open []string
		if m.Role == wire.RoleAssistant {
			for _, b := range m.Content {
				if b.Type == wire.BlockToolUse && b.FromCode() {
					calls[b.ID] = true
					open = append(open, b.ID)
				}
			}
		}
		if len(open) == 0 {
			continue
		}
		if i+1 >= len(req.Messages) || req.Messages[i+1].Role != wire.RoleUser {
			return fault.Errorf(fault.Invalid, "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, strings.Join(open, ", "))
		}
		answered := map[string]bool{}
		for j, b := range req.Messages[i+1].Content {
			if b.Type != wire.BlockToolResult {
				return fault.Errorf(fault.Invalid, "messages.%d.content.%d: a message answering tool calls made from code holds only tool_result blocks", i+1, j)
			}
			answered[b.ToolUseID] = true
		}
		for _, id := range open {
			if !answered[id] {
				return fault.Errorf(fault.Invalid, "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, id)
			}
		}
		if i+2 == len(req.Messages) && (req.Container == nil || req.Container.ID == "") {
			return fault.New(fault.Invalid, "container: container_id is required when there are pending tool uses generated by code execution with tools.")
		}
	}
	return nil
}

// stripProgrammatic takes the programmatic tool calls and their results out
// of a history (the model never made them: it sees the cell and its
// result), merging the assistant messages they separated. It returns the
// client's results of the calls the last user message answers, by the id
// of the code_execution call that made them, and the ids of every
// code_execution call that made calls.
func stripProgrammatic(in []wire.Message) (out []wire.Message, resume map[string][]ToolAnswer, callers map[string]bool) {
	caller := map[string]string{} // tool_use id -> srvtoolu_ id
	resume, callers = map[string][]ToolAnswer{}, map[string]bool{}
	for i, m := range in {
		var kept []wire.ContentBlock
		for _, b := range m.Content {
			switch {
			case m.Role == wire.RoleAssistant && b.Type == wire.BlockToolUse && b.FromCode():
				caller[b.ID] = b.Caller.ToolID
				callers[b.Caller.ToolID] = true
				continue
			case m.Role == wire.RoleUser && b.Type == wire.BlockToolResult && caller[b.ToolUseID] != "":
				if i == len(in)-1 {
					id := caller[b.ToolUseID]
					resume[id] = append(resume[id], ToolAnswer{ToolUseID: b.ToolUseID, Content: b.Content, IsError: b.IsError})
				}
				continue
			}
			if b.Caller != nil && !b.FromCode() {
				// The client is told the model made a call itself; the
				// model is never sent that (the same rule as decoding).
				b.Caller = nil
			}
			kept = append(kept, b)
		}
		if len(kept) == 0 && len(m.Content) > 0 {
			continue // it held only programmatic blocks
		}
		if n := len(out); n > 0 && m.Role == wire.RoleAssistant && out[n-1].Role == wire.RoleAssistant {
			out[n-1].Content = append(out[n-1].Content, kept...)
			continue
		}
		out = append(out, wire.Message{Role: m.Role, Content: kept})
	}
	return out, resume, callers
}

// codeTools returns the request's client tools as code sees them.
func (t *turn) codeTools() []CodeTool {
	if !CallsFromCode(t.plan.ToolType) {
		return nil
	}
	var out []CodeTool
	for _, tool := range t.req.Tools {
		if isCodeExecutionType(tool.Type) || tool.Type == wire.ToolTypeSandboxV1 || (tool.Type != "" && tool.Type != wire.ToolTypeCustom) {
			continue
		}
		out = append(out, CodeTool{Name: tool.Name, Description: tool.Description, InputSchema: tool.InputSchema, Allowed: codeCallable(tool, t.plan.ToolType)})
	}
	return out
}

// pythonDefinition is the code_execution sub-tool's definition for this
// request: with client tools callable from code, its description lists
// them.
func (t *turn) pythonDefinition() ToolDefinition {
	def := PythonToolDefinition(t.plan.ToolType)
	var b strings.Builder
	for _, tool := range t.req.Tools {
		if isCodeExecutionType(tool.Type) || tool.Type == wire.ToolTypeSandboxV1 || !codeCallable(tool, t.plan.ToolType) {
			continue
		}
		fmt.Fprintf(&b, "\n- %s: %s Input schema: %s", tool.Name, strings.TrimSpace(tool.Description), compactJSON(tool.InputSchema))
	}
	if b.Len() == 0 {
		return def
	}
	return ToolDefinition{
		Name: def.Name, InputSchema: def.InputSchema,
		Description: def.Description + " These tools of the client are async functions in the interpreter: call them " +
			"with await, keyword arguments being the properties of their input schema (positional ones follow the " +
			"schema's order), e.g. `result = await name(arg=value)`; calls run while the cell waits, several at once with " +
			"asyncio.gather. A result is its JSON decoded when it is JSON, else its text; a failed call raises ToolError. " +
			"Only what the cell prints comes back to you, so loop, filter and aggregate in the code:" + b.String(),
	}
}

// clientDefinition is a client tool as the model gets it: without
// allowed_callers, which only threadbox reads.
func clientDefinition(tool wire.Tool) ToolDefinition {
	raw := tool.Raw
	if len(tool.AllowedCallers) > 0 && len(raw) > 0 {
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) == nil {
			delete(fields, "allowed_callers")
			if b, err := json.Marshal(fields); err == nil {
				raw = b
			}
		}
	}
	return ToolDefinition{Name: tool.Name, Description: tool.Description, InputSchema: tool.InputSchema, Raw: bytes.Clone(raw)}
}

// CallerType is the caller type of calls made from code under both
// code_execution_20260120 and code_execution_20260521: one environment,
// and the caller types Anthropic's SDKs know end at 20260120.
const CallerType = wire.ToolTypeCodeExecution2601

// sendPending sends the tool_use blocks of the client tool calls a cell is
// paused on, each with its caller.
func (t *turn) sendPending(call ToolCall, pending []wire.PendingCall) error {
	for _, pc := range pending {
		var buf bytes.Buffer
		in := json.RawMessage(`{}`)
		if json.Compact(&buf, pc.Input) == nil && buf.Len() > 0 {
			in = buf.Bytes() // as the model's own inputs stream: no spaces
		}
		b := wire.ContentBlock{Type: wire.BlockToolUse, ID: pc.ID, Name: pc.Name, Input: in, Caller: &wire.Caller{Type: CallerType, ToolID: call.ID}}
		for _, ev := range blockEvents(b) {
			ev.Index = t.next
			if err := t.send(ev); err != nil {
				return err
			}
		}
		t.next++
	}
	return nil
}
