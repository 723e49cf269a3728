package messages

import (
	"encoding/json"
	"slices"

	"threadbox/app/messages/wire"
)

// The sandbox_v1 tools (docs/api.md, docs/sandbox-tools.md). The spec
// {"name": "sandbox", "type": "sandbox_v1"} enables all of them; a spec
// {"name": "<tool>", "type": "sandbox_v1"} enables that one tool.
//
// Each call is returned like a code-execution sub-tool: a server_tool_use
// block followed by a result block
//
//	{"type":"sandbox_tool_result","tool_use_id":"srvtoolu_…","content":{"type":"<tool>_result", …the tool's fields}}
//
// or, when the tool could not run,
//
//	{"type":"sandbox_tool_result","tool_use_id":"…","content":
//	  {"type":"sandbox_tool_result_error","error_code":"unavailable","detail":{"code":…,"explanation":…}}}
const (
	SandboxToolName = "sandbox"
	ToolSandboxBash = "sandbox_bash"
	ToolReplExecute = "repl_execute"
	ToolExecCommand = "exec_command"
	ToolWriteStdin  = "write_stdin"
	ToolEditFile    = "edit_file"
	ToolBSLCheck    = "bsl_check"
)

// SandboxTools lists the sandbox_v1 tools in the order they are offered.
var SandboxTools = []string{ToolSandboxBash, ToolReplExecute, ToolExecCommand, ToolWriteStdin, ToolEditFile, ToolBSLCheck}

// IsSandboxTool reports whether name is one of the sandbox_v1 tools.
func IsSandboxTool(name string) bool { return slices.Contains(SandboxTools, name) }

// resultBlockType is the type of the block carrying the result of a call
// to tool name.
func resultBlockType(name string) string {
	switch {
	case name == wire.SubToolTextEditor:
		return wire.BlockTextEditorResult
	case IsSandboxTool(name):
		return wire.BlockSandboxResult
	case name == SubToolCodeExecution:
		return wire.BlockCodeExecutionResult
	case name == wire.SubToolWebFetch:
		return wire.BlockWebFetchResult
	}
	return wire.BlockBashResult
}

// isResultBlock reports whether a block type carries a server tool result.
func isResultBlock(t string) bool {
	return t == wire.BlockBashResult || t == wire.BlockTextEditorResult || t == wire.BlockSandboxResult || t == wire.BlockCodeExecutionResult || t == wire.BlockWebFetchResult
}

// SandboxToolDefinitions returns the definitions the model sees for the
// given sandbox_v1 tools.
func SandboxToolDefinitions(names []string) []ToolDefinition {
	var out []ToolDefinition
	for _, n := range names {
		if d, ok := sandboxTools[n]; ok {
			out = append(out, d)
		}
	}
	return out
}

// sandboxTools are sandboxDefs encoded once.
var sandboxTools = func() map[string]ToolDefinition {
	out := map[string]ToolDefinition{}
	for n, d := range sandboxDefs {
		out[n] = encoded([]ToolDefinition{{Name: n, Description: d.desc, InputSchema: json.RawMessage(d.schema)}})[0]
	}
	return out
}()

var sandboxDefs = map[string]struct{ desc, schema string }{
	ToolSandboxBash: {
		"Run a one-off shell command in the sandbox (bash). Returns stdout, stderr, exit_code, truncated and the files " +
			"the command created or changed in /home/agent/workspace. The product's API is reachable at $ANTHROPIC_BASE_URL " +
			"with $ANTHROPIC_AUTH_TOKEN and $ANTHROPIC_MODEL; nothing else on the network is.",
		`{"type":"object","properties":{` +
			`"command":{"type":"string","description":"The shell command to run."},` +
			`"description":{"type":"string","description":"A short label of what the command does."},` +
			`"timeout_seconds":{"type":"integer","minimum":1,"maximum":3600,"description":"Timeout in seconds (default 60)."},` +
			`"cwd":{"type":"string","description":"Working directory (default /home/agent/workspace)."}},` +
			`"required":["command"]}`,
	},
	ToolReplExecute: {
		"Run Python code in a persistent REPL (state is kept between calls). Helpers: peek(x, start=0, n=2000), " +
			"grep(pattern, text_or_path), chunk_indices(length, size, overlap=0), llm_query(prompt) (asks the model " +
			"through the product's API) and FINAL(value) (marks the final answer). Set restart to start a clean REPL.",
		`{"type":"object","properties":{` +
			`"code":{"type":"string","description":"Python code to run."},` +
			`"restart":{"type":"boolean","description":"Start a clean REPL before running code."},` +
			`"timeout_seconds":{"type":"integer","minimum":1,"maximum":3600}},` +
			`"required":["code"]}`,
	},
	ToolExecCommand: {
		"Run a command in a pseudo-terminal. A command that ends within grace_seconds returns its output and exit_code; " +
			"a long-lived one (a server, a REPL, a watcher) stays alive and returns a session_id to drive with write_stdin.",
		`{"type":"object","properties":{` +
			`"command":{"type":"string"},` +
			`"rows":{"type":"integer","minimum":1,"maximum":1000,"description":"Terminal rows (default 24)."},` +
			`"cols":{"type":"integer","minimum":1,"maximum":1000,"description":"Terminal columns (default 80)."},` +
			`"grace_seconds":{"type":"number","minimum":0,"description":"How long to wait for a quick command to end (default 2)."}},` +
			`"required":["command"]}`,
	},
	ToolWriteStdin: {
		"Send characters to a live exec_command session and read its fresh output. Add \\n to send a line. " +
			"Pass the cursor of the previous read as since to get only what came after it.",
		`{"type":"object","properties":{` +
			`"session_id":{"type":"string"},` +
			`"input":{"type":"string"},` +
			`"since":{"type":"integer","minimum":0},` +
			`"wait_seconds":{"type":"number","minimum":0,"description":"How long to wait for new output (default 1)."}},` +
			`"required":["session_id","input"]}`,
	},
	ToolEditFile: {
		"Replace old_str with new_str in a file. When old_str is not found exactly, a match that differs only in " +
			"whitespace is used, then the closest near match above a similarity threshold; an ambiguous match is refused. " +
			"The result says which match was used.",
		`{"type":"object","properties":{` +
			`"path":{"type":"string"},"old_str":{"type":"string"},"new_str":{"type":"string"}},` +
			`"required":["path","old_str","new_str"]}`,
	},
	ToolBSLCheck: {
		"Run bsl-language-server's analysis on a 1C:Enterprise .bsl/.os file or a configuration folder and return its diagnostics.",
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
	},
}
