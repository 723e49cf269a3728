package fakeupstream

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// Scripted scenarios of code_execution_20260120 and later: the model's
// Python cells (the code_execution sub-tool threadbox offers it) and,
// with programmatic tool calling, cells that call the client's tools.

var cellSeq atomic.Int64

// PythonCell is a step running code in the container's persistent
// Python interpreter (the code_execution sub-tool).
func PythonCell(code string) Reply {
	in, _ := json.Marshal(map[string]string{"code": code})
	id := fmt.Sprintf("toolu_cell%d", cellSeq.Add(1))
	return Reply{Content: []wire.ContentBlock{{Type: wire.BlockToolUse, ID: id, Name: messages.SubToolCodeExecution, Input: in}}}
}

// ToolLoop is a cell that calls the client tool named tool once for each
// argument, with the argument as its property param, and prints the
// results as one JSON list (what the model then reads).
func ToolLoop(tool, param string, args ...string) Reply {
	quoted := make([]string, len(args))
	for i, a := range args {
		b, _ := json.Marshal(a)
		quoted[i] = string(b)
	}
	return PythonCell(fmt.Sprintf("import json\nresults = []\nfor arg in [%s]:\n    results.append(await %s(%s=arg))\nprint(json.dumps(results))",
		strings.Join(quoted, ", "), tool, param))
}
