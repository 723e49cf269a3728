package messages

import (
	"encoding/json"

	"threadbox/app/messages/wire"
)

// The Python sub-tool of code_execution_20260120 and code_execution_20260521
// (docs/messages.md, "Python REPL"). Besides bash_code_execution and
// text_editor_code_execution, the model of these versions writes Python
// cells that run in one persistent interpreter per container, as Anthropic
// documents for programmatic tool calling:
//
//	{"type":"server_tool_use","id":"srvtoolu_…","name":"code_execution","input":{"code":"x = 41"}}
//	{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_…","content":
//	  {"type":"code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}}
//
// or, when the cell could not run,
//
//	{"type":"code_execution_tool_result","tool_use_id":"…","content":
//	  {"type":"code_execution_tool_result_error","error_code":"execution_time_exceeded"}}
const (
	SubToolCodeExecution = "code_execution"
)

// HasPythonREPL reports whether the code-execution tool type runs the
// model's Python in a persistent interpreter (the code_execution sub-tool).
func HasPythonREPL(toolType string) bool {
	return toolType == wire.ToolTypeCodeExecution2505 || CallsFromCode(toolType)
}

// PythonOnly reports whether the code-execution tool type is the legacy
// Python-only tool, code_execution_20250522: the model gets the
// code_execution Python tool and neither bash nor the text editor, and its
// results are the code_execution_tool_result blocks that version returned.
func PythonOnly(toolType string) bool { return toolType == wire.ToolTypeCodeExecution2505 }

// CallsFromCode reports whether code run by the code-execution tool type
// may call the request's client tools (programmatic tool calling), which
// came with code_execution_20260120.
func CallsFromCode(toolType string) bool {
	return toolType == wire.ToolTypeCodeExecution2601 || toolType == wire.ToolTypeCodeExecution2605
}

// PythonToolDefinition returns the code_execution sub-tool as the model of
// toolType sees it: code_execution_20260521's description also states the
// per-cell wall-clock limit.
func PythonToolDefinition(toolType string) ToolDefinition {
	if toolType == wire.ToolTypeCodeExecution2605 {
		return pythonTools[1]
	}
	return pythonTools[0]
}

const pythonDescription = "Run a Python cell in the sandbox's persistent Python interpreter. Variables, imports, functions " +
	"and open objects stay between calls, and between requests that reuse the container, until its sandbox stops " +
	"(idle shutdown or restart): the first cell after that says a new interpreter started. The working directory is " +
	"/home/agent/workspace; files persist. print() what you want to see; the value of a last expression is not shown. " +
	"Files written to $OUTPUT_DIR are saved to /mnt/user-data/outputs/ as downloadable deliverables. No internet access."

const pythonSchema = `{"type":"object","properties":{` +
	`"code":{"type":"string","description":"The Python code of the cell."}},` +
	`"required":["code"]}`

// pythonTools are the two definitions, encoded once.
var pythonTools = encoded([]ToolDefinition{
	{Name: SubToolCodeExecution, Description: pythonDescription, InputSchema: json.RawMessage(pythonSchema)},
	{
		Name: SubToolCodeExecution,
		Description: pythonDescription + " Each cell has a 90-second wall-clock limit: a cell that runs longer is " +
			"stopped and returns a non-zero return_code with a detection_timeout status in its output; the " +
			"interpreter and its variables stay, so split long work into several cells.",
		InputSchema: json.RawMessage(pythonSchema),
	},
})
