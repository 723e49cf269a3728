package llmtest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// pausingExecutor plays the code_execution sub-tool of programmatic tool
// calling: a cell's first run pauses on one call of get_weather per city
// in turn; the client's results resume it, and once all are in, the cell
// ends printing them.
type pausingExecutor struct {
	cities []string

	mu      sync.Mutex
	runs    int      // cells started
	results []string // the client's results, in order
}

// Execute pauses or ends the cell.
func (x *pausingExecutor) Execute(_ context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if call.Resume == nil {
		x.runs++
	}
	for _, a := range call.Resume {
		var s string
		_ = json.Unmarshal(a.Content, &s)
		x.results = append(x.results, s)
	}
	if n := len(x.results); n < len(x.cities) {
		in, _ := json.Marshal(map[string]string{"city": x.cities[n]})
		return &wire.ToolResult{Type: wire.ResultCodeExecution, Pending: []wire.PendingCall{{ID: "toolu_code_" + x.cities[n], Name: "get_weather", Input: in}}}, nil
	}
	return &wire.ToolResult{Type: wire.ResultCodeExecution, Stdout: strings.Join(x.results, "; ") + "\n"}, nil
}

// testProgrammaticCalls: a cell of code_execution_20260120 calls the
// client's tool (its allowed_callers names the tool type) once per city;
// each call ends the request with the tool_use and its caller, the
// client's result resumes the cell in the next request, and the model —
// which never sees those calls, nor the tool as its own — gets the cell's
// output at the end.
func testProgrammaticCalls(e *env) {
	x := &pausingExecutor{cities: []string{"Paris", "Rome"}}
	svc := messages.New(e.model, messages.Tools{CodeExecution: x}, messages.Config{})
	tool := weatherTool
	tool.AllowedCallers = []string{wire.ToolTypeCodeExecution2601}
	tools := []wire.Tool{{Type: wire.ToolTypeCodeExecution2601, Name: "code_execution"}, tool}
	code := `{"code":"for c in ['Paris', 'Rome']:\n    print(await get_weather(city=c))"}`
	e.script(reply(textBlock("Checking."), toolUse("toolu_cell", messages.SubToolCodeExecution, code)))
	history := []wire.Message{userText("What is the weather in Paris and Rome?")}
	create := func() *wire.Response {
		e.t.Helper()
		req := &wire.Request{Messages: history, Tools: tools, Container: &wire.ContainerParam{ID: "box"}}
		req.Stream = e.stream
		req.Model, req.MaxTokens = "default", 1024
		resp, err := svc.Create(context.Background(), req, messages.RunOptions{ContainerID: "container-1"})
		if err != nil {
			e.t.Fatalf("loop: %v", err)
		}
		return resp
	}
	first := create()
	checkBlocks(e.t, "first response", first.Content, []wire.ContentBlock{
		textBlock("Checking."),
		{Type: wire.BlockServerToolUse, Name: messages.SubToolCodeExecution, Input: json.RawMessage(code)},
		toolUse("", "get_weather", `{"city":"Paris"}`),
	})
	cell := first.Content[1].ID
	if c := first.Content[2].Caller; first.StopReason != wire.StopToolUse || c == nil || c.Type != wire.ToolTypeCodeExecution2601 || c.ToolID != cell {
		e.t.Fatalf("stop_reason %q, caller %+v: want tool_use and the cell %s", first.StopReason, c, cell)
	}
	step := e.model.Requests()[0]
	if offers(step, "get_weather") || !offers(step, messages.SubToolCodeExecution) {
		e.t.Errorf("the model's tools are %q: get_weather is the code's, not the model's", toolNames(step))
	}
	answer := func(resp *wire.Response, text string) {
		content, _ := json.Marshal(text)
		var blocks []wire.ContentBlock
		for _, b := range resp.Content {
			if b.Type == wire.BlockToolUse {
				blocks = append(blocks, wire.ContentBlock{Type: wire.BlockToolResult, ToolUseID: b.ID, Content: content})
			}
		}
		history = append(history, wire.Message{Role: wire.RoleAssistant, Content: resp.Content}, wire.Message{Role: wire.RoleUser, Content: blocks})
	}
	answer(first, "Paris: sunny")
	second := create()
	checkBlocks(e.t, "second response", second.Content, []wire.ContentBlock{toolUse("", "get_weather", `{"city":"Rome"}`)})
	if c := second.Content[0].Caller; second.StopReason != wire.StopToolUse || c == nil || c.ToolID != cell {
		e.t.Fatalf("second response: stop_reason %q, caller %+v", second.StopReason, c)
	}
	if n := len(e.model.Requests()); n != 1 {
		e.t.Fatalf("the model was asked %d times while the cell ran, want once", n)
	}

	answer(second, "Rome: rain")
	e.script(reply(textBlock(scriptedFinal)))
	last := create()
	checkBlocks(e.t, "last response", last.Content, []wire.ContentBlock{{Type: wire.BlockCodeExecutionResult}, textBlock(scriptedFinal)})
	if last.Content[0].ToolUseID != cell || last.Content[0].Result.Stdout != "Paris: sunny; Rome: rain\n" || last.StopReason != wire.StopEndTurn {
		e.t.Fatalf("last response: result %+v for %q, stop %q", last.Content[0].Result, last.Content[0].ToolUseID, last.StopReason)
	}
	if x.runs != 1 {
		e.t.Errorf("the cell started %d times, want once", x.runs)
	}
	reqs := e.model.Requests()
	final := reqs[len(reqs)-1]
	var seen []string
	for _, m := range final.Messages {
		for _, b := range m.Content {
			if b.Caller != nil || b.Name == "get_weather" {
				e.t.Errorf("the model saw the code's call %s", describe([]wire.ContentBlock{b}))
			}
			if b.Type == wire.BlockToolResult {
				seen = append(seen, string(b.Content))
			}
		}
	}
	if len(seen) != 1 || !strings.Contains(seen[0], `Paris: sunny; Rome: rain`) {
		e.t.Errorf("the model's results are %q, want the cell's output only", seen)
	}
}
