// Package llmtest is the conformance suite every model adapter passes: one
// set of tests of what the tool loop (app/messages) needs from a
// messages.Model, run against each adapter (anthropic, openai, runner) as a
// row, the way infra/sandbox/sandboxtest runs each sandbox backend.
//
// Adapters with an upstream talk to a strict fake upstream
// (infra/llm/fakeupstream) in their own wire format, scripted with the
// answers the case needs; the runner has no upstream and answers from the
// code blocks of the prompt. The scripts are written to be what the runner
// answers to the same prompts, so one case asserts the same content for
// every row. Every case also checks that no request was one a real provider
// refuses: the fake upstream's strict rules on the wire, and the same
// Anthropic rules on each step request the adapter was handed, so the
// runner's row is held to them too.
//
// Rows differ only where Row.Cannot says so, each time with the reason; a
// case needing a capability the row lacks is skipped with that reason.
package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/runner"
	"threadbox/infra/llm/upstream"
)

// Capability is something a model adapter may be unable to do.
type Capability string

// The capabilities a row may lack.
const (
	// Upstream: the adapter talks to an upstream over HTTP, so it has
	// upstream errors to report and failed requests to retry.
	Upstream Capability = "upstream errors and retries"
	// ClientTools: the model may call the client's own tools, alone or
	// beside server tools.
	ClientTools Capability = "client tool calls"
	// UpstreamPauseTurn: the upstream itself may end a step with
	// stop_reason pause_turn (its own server tools ran long), which the
	// adapter must pass on.
	UpstreamPauseTurn Capability = "pause_turn from the upstream"
	// MaxTokens: an answer cut at max_tokens says so (stop_reason
	// max_tokens).
	MaxTokens Capability = "answers cut at max_tokens"
	// StopSequence: an answer ended by a stop sequence says which
	// (stop_reason stop_sequence and stop_sequence).
	StopSequence Capability = "naming the stop sequence that ended an answer"
	// UpstreamServerTools: the upstream runs typed server tools of its own
	// (an operator's ALLOW_TOOL_TYPES, e.g. Anthropic's web search), whose
	// server_tool_use and result blocks pass through threadbox both ways.
	UpstreamServerTools Capability = "the upstream's own server tools"
	// Thinking: the model's thinking blocks (with their signatures) come
	// back, streamed as thinking and signature deltas, and go back to the
	// model unchanged with the tool calls they led to.
	Thinking Capability = "thinking blocks"
	// ParallelCalls: one step may call several tools at once.
	ParallelCalls Capability = "several tool calls in one step"
	// SandboxTools: the model may call the sandbox_v1 tools
	// beside the code-execution sub-tools.
	SandboxTools Capability = "sandbox_v1 tool calls"
	// StartUsage: a streamed step reports its input tokens (and cache
	// counts) when it starts, before its first block (StepStart), so that
	// the stream's message_start carries them.
	StartUsage Capability = "input tokens at a streamed step's start"
)

// knownBugs are cases that fail today for a reason outside the adapters,
// by case name. Such a case is reported as skipped with the reason and
// what it found; once it passes it fails, so that its entry is removed.
var knownBugs = map[string]string{}

// Row is one model adapter under test.
type Row struct {
	// Format is the wire format the adapter speaks to its upstream; empty
	// for a model without an upstream (the runner).
	Format fakeupstream.Format
	// New returns the adapter. cfg.BaseURL is the fake upstream's address
	// without /v1; New adds what the adapter expects.
	New func(cfg upstream.Config) messages.Model
	// Cannot names what the adapter cannot do and why. The suite skips
	// the cases that need it, saying so with the reason.
	Cannot map[Capability]string
}

// Suite-wide constants: the prompts, and the runner's answers to them that
// the scripts repeat.
const (
	// oneBlock is a prompt the runner answers with one bash call.
	oneBlock = "Please run this:\n```bash\necho hi\n```\n"
	// twoBlocks is a prompt the runner answers with two bash calls.
	twoBlocks = "Run both:\n```bash\necho one\n```\n```bash\necho two\n```\n"
	// scriptedFinal is the scripted rows' closing text after code ran.
	// Its runes of two to four bytes are split across stream chunks.
	scriptedFinal = "The command printed hi — ✓, Grüße aus 東京 🌸."
)

// capabilities are those a case may need.
var capabilities = []Capability{Upstream, ClientTools, UpstreamPauseTurn, MaxTokens, StopSequence, UpstreamServerTools, Thinking, ParallelCalls, SandboxTools, StartUsage}

// Run runs the suite against the adapter of row.
func Run(t *testing.T, row Row) {
	for c, why := range row.Cannot {
		if !slices.Contains(capabilities, c) || strings.TrimSpace(why) == "" {
			t.Fatalf("Row.Cannot[%q] = %q: a row names a capability of the suite and says why it lacks it", c, why)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, need := range c.needs {
				if why, ok := row.Cannot[need]; ok {
					t.Skipf("the adapter cannot do %s: %s", need, why)
				}
			}
			for _, stream := range []bool{false, true} {
				mode := "step"
				if stream {
					mode = "stream"
				}
				t.Run(mode, func(t *testing.T) {
					e := newEnv(t, row, stream)
					defer e.checkValid() // also after a case's Fatal
					c.run(e)
				})
			}
		})
	}
}

// A case is one behaviour, run once without streaming and once streamed.
type testCase struct {
	name  string
	needs []Capability
	run   func(e *env)
}

var cases = []testCase{
	{name: "text", run: testText},
	{name: "tool_use", run: testToolUse},
	{name: "tool_history", run: testToolHistory},
	{name: "max_tokens", needs: []Capability{MaxTokens}, run: testMaxTokens},
	{name: "stop_sequence", needs: []Capability{StopSequence}, run: testStopSequence},
	{name: "sampling", needs: []Capability{Upstream}, run: testSampling},
	{name: "server_tools", run: testServerTools},
	{name: "tool_choice", run: testToolChoice},
	{name: "parallel_server_calls", needs: []Capability{ParallelCalls}, run: testParallelServerCalls},
	{name: "thinking", needs: []Capability{Thinking}, run: testThinking},
	{name: "tool_families", needs: []Capability{SandboxTools}, run: testToolFamilies},
	{name: "client_tools_mixed", needs: []Capability{ClientTools}, run: testClientToolsMixed},
	{name: "programmatic_tool_calls", needs: []Capability{ClientTools}, run: testProgrammaticCalls},
	{name: "loop_pause_turn", run: testLoopPauseTurn},
	{name: "upstream_pause_turn", needs: []Capability{UpstreamPauseTurn}, run: testUpstreamPauseTurn},
	{name: "upstream_server_tools", needs: []Capability{UpstreamServerTools}, run: testUpstreamServerTools},
	{name: "history_without_its_tools", run: testHistoryWithoutTools},
	{name: "empty_text", run: testEmptyText},
	{name: "start_usage", needs: []Capability{StartUsage}, run: testStartUsage},
	{name: "retries", needs: []Capability{Upstream}, run: testRetries},
	{name: "upstream_errors", needs: []Capability{Upstream}, run: testUpstreamErrors},
	{name: "cancelled", run: testCancelled},
}

// env is one case's model, fake upstream and sandbox.
type env struct {
	t      *testing.T
	row    Row
	stream bool
	up     *fakeupstream.Server // nil for a row without an upstream
	model  *recorder
	exec   *executor // the code-execution family
	box    *executor // the sandbox_v1 family

	checked bool // checkValid ran
}

// newEnv returns a case's environment: a fake upstream of its own when the
// row has one, the adapter (two retries) behind a recorder, a new sandbox.
func newEnv(t *testing.T, row Row, stream bool) *env {
	e := &env{t: t, row: row, stream: stream, exec: &executor{}, box: &executor{sandbox: true}}
	if row.Format != "" {
		e.up = fakeupstream.New()
		t.Cleanup(e.up.Close)
	}
	e.model = &recorder{m: e.adapter(upstream.Config{MaxRetries: 2})}
	return e
}

// adapter returns a new adapter talking to the case's fake upstream.
func (e *env) adapter(cfg upstream.Config) messages.Model {
	if e.up != nil {
		cfg.BaseURL = e.up.URL()
	}
	cfg.APIKey, cfg.Model = "test-key", "fake-model"
	if cfg.MaxRetryWait == 0 {
		cfg.MaxRetryWait = 5 * time.Second
	}
	return e.row.New(cfg)
}

// scripted tells whether the model's answers are the scripted replies.
func (e *env) scripted() bool { return e.up != nil }

// script queues the upstream's next answers; a row without an upstream
// answers by itself.
func (e *env) script(replies ...fakeupstream.Reply) {
	if e.up != nil {
		e.up.Push(replies...)
	}
}

// step asks the model for one step, streamed or not.
func (e *env) step(ctx context.Context, m messages.Model, req messages.StepRequest) (*messages.StepResult, error) {
	if e.stream {
		return m.StreamStep(ctx, req, func(messages.StepEvent) error { return nil })
	}
	return m.Step(ctx, req)
}

// loop returns the tool loop over the case's model and sandbox.
func (e *env) loop(cfg messages.Config) *messages.Service {
	return messages.New(e.model, messages.Tools{CodeExecution: e.exec, Sandbox: e.box}, cfg)
}

// create runs one Messages API request through the loop.
func (e *env) create(svc *messages.Service, req *wire.Request) *wire.Response {
	e.t.Helper()
	req.Stream = e.stream
	if req.Model == "" {
		req.Model = "default"
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = 1024
	}
	resp, err := svc.Create(context.Background(), req, messages.RunOptions{ContainerID: "container-1"})
	if err != nil {
		e.t.Fatalf("loop: %v", err)
	}
	return resp
}

// checkValid fails the case when a request was one a provider refuses or
// a stream did not add up; once per case.
func (e *env) checkValid() {
	e.t.Helper()
	if e.checked {
		return
	}
	e.checked = true
	if e.up != nil {
		if r := e.up.Refused(); len(r) > 0 {
			e.t.Errorf("the strict upstream refused %d request(s): %q", len(r), r)
		}
	}
	for _, v := range e.model.problems() {
		e.t.Error(v)
	}
}

// upstreamRequests returns the number of requests the upstream received.
func (e *env) upstreamRequests() int {
	if e.up == nil {
		return 0
	}
	return len(e.up.Requests())
}

// recorder is the adapter under test as the loop sees it: it keeps each
// step request, checks it against the providers' rules, and checks that a
// streamed step's events add up to its result.
type recorder struct {
	m messages.Model

	mu       sync.Mutex
	requests []messages.StepRequest
	problem  []string
}

// record keeps req and notes it when a provider would refuse it.
func (r *recorder) record(req messages.StepRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, req)
	if why := refusal(req); why != "" {
		r.problem = append(r.problem, fmt.Sprintf("step request %d breaks the providers' rules: %s", len(r.requests), why))
	}
}

// fail notes a problem the case reports at its end.
func (r *recorder) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problem = append(r.problem, fmt.Sprintf(format, args...))
}

// problems returns the problems noted so far.
func (r *recorder) problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.problem)
}

// Requests returns the step requests the adapter was handed.
func (r *recorder) Requests() []messages.StepRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// Step records req and asks the adapter.
func (r *recorder) Step(ctx context.Context, req messages.StepRequest) (*messages.StepResult, error) {
	r.record(req)
	return r.m.Step(ctx, req)
}

// StreamStep records req, asks the adapter and checks the events.
func (r *recorder) StreamStep(ctx context.Context, req messages.StepRequest, emit func(messages.StepEvent) error) (*messages.StepResult, error) {
	r.record(req)
	var evs []messages.StepEvent
	res, err := r.m.StreamStep(ctx, req, func(ev messages.StepEvent) error {
		evs = append(evs, ev)
		return emit(ev)
	})
	if err == nil {
		if why := streamMismatch(evs, res); why != "" {
			r.fail("streamed events do not add up to the step's result: %s", why)
		}
	}
	return res, err
}

// refusal checks a step request against the Anthropic rules the fake
// upstream enforces (the loop's requests are in that model whatever the
// adapter's wire format).
func refusal(req messages.StepRequest) string {
	msgs, err := wire.MarshalMessages(req.Messages)
	if err != nil {
		return fmt.Sprintf("encode messages: %v", err)
	}
	tools, err := json.Marshal(req.Tools)
	if err != nil {
		return fmt.Sprintf("encode tools: %v", err)
	}
	if len(req.Tools) == 0 {
		tools = []byte("[]")
	}
	body := fmt.Sprintf(`{"messages":%s,"tools":%s}`, msgs, tools)
	return fakeupstream.Refusal(fakeupstream.Anthropic, json.RawMessage(body))
}

// streamMismatch returns how the events of a streamed step disagree with
// its result, or "": blocks start in order from 0, deltas and stops come
// only for open blocks, every block stops, and the deltas add up to each
// block's text and input.
func streamMismatch(evs []messages.StepEvent, res *messages.StepResult) string {
	if res == nil {
		return "no result"
	}
	open := map[int]bool{}
	stopped := map[int]bool{}
	text := map[int]*strings.Builder{}
	input := map[int]*strings.Builder{}
	thinking := map[int]*strings.Builder{}
	signature := map[int]*strings.Builder{}
	started := 0
	for n, ev := range evs {
		switch ev.Kind {
		case messages.StepStart:
			if n != 0 {
				return fmt.Sprintf("event %d starts the step, which must come first and once", n)
			}
		case messages.StepBlockStart:
			if ev.Index != started {
				return fmt.Sprintf("event %d starts block %d, want %d", n, ev.Index, started)
			}
			if ev.Index >= len(res.Content) {
				return fmt.Sprintf("event %d starts block %d, the result has %d", n, ev.Index, len(res.Content))
			}
			want := res.Content[ev.Index]
			if ev.Block.Type != want.Type || ev.Block.ID != want.ID || ev.Block.Name != want.Name {
				return fmt.Sprintf("block %d started as %s %q %q, the result has %s %q %q", ev.Index, ev.Block.Type, ev.Block.ID, ev.Block.Name, want.Type, want.ID, want.Name)
			}
			open[ev.Index] = true
			text[ev.Index], input[ev.Index] = &strings.Builder{}, &strings.Builder{}
			thinking[ev.Index], signature[ev.Index] = &strings.Builder{}, &strings.Builder{}
			text[ev.Index].WriteString(ev.Block.Text)
			thinking[ev.Index].WriteString(ev.Block.Thinking)
			signature[ev.Index].WriteString(ev.Block.Signature)
			started++
		case messages.StepBlockDelta:
			if !open[ev.Index] {
				return fmt.Sprintf("event %d: a delta for block %d, which is not open", n, ev.Index)
			}
			text[ev.Index].WriteString(ev.Delta.Text)
			input[ev.Index].WriteString(ev.Delta.PartialJSON)
			thinking[ev.Index].WriteString(ev.Delta.Thinking)
			signature[ev.Index].WriteString(ev.Delta.Signature)
		case messages.StepBlockStop:
			if !open[ev.Index] {
				return fmt.Sprintf("event %d stops block %d, which is not open", n, ev.Index)
			}
			open[ev.Index] = false
			stopped[ev.Index] = true
		}
	}
	if started != len(res.Content) {
		return fmt.Sprintf("%d blocks started, the result has %d", started, len(res.Content))
	}
	for i, b := range res.Content {
		if !stopped[i] {
			return fmt.Sprintf("block %d never stopped", i)
		}
		switch b.Type {
		case wire.BlockText:
			if got := text[i].String(); got != b.Text {
				return fmt.Sprintf("block %d: the deltas say %q, the result %q", i, got, b.Text)
			}
		case wire.BlockThinking:
			if thinking[i].String() != b.Thinking || signature[i].String() != b.Signature {
				return fmt.Sprintf("block %d: the deltas think %q signed %q, the result %q signed %q", i, thinking[i].String(), signature[i].String(), b.Thinking, b.Signature)
			}
		case wire.BlockToolUse:
			if !sameJSON(input[i].String(), string(b.Input)) {
				return fmt.Sprintf("block %d: the deltas give the input %s, the result %s", i, input[i].String(), b.Input)
			}
		}
	}
	return ""
}

// sameJSON tells whether a and b are the same JSON value (empty is {}).
func sameJSON(a, b string) bool {
	var va, vb any
	if strings.TrimSpace(a) == "" {
		a = "{}"
	}
	if strings.TrimSpace(b) == "" {
		b = "{}"
	}
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// executor is one family of server tools: it runs nothing and answers
// each call with "out: <command>\n", recording the commands.
type executor struct {
	sandbox bool // answers as a sandbox_v1 tool, not a code-execution one

	mu       sync.Mutex
	commands []string
}

// Execute records the call and answers it.
func (x *executor) Execute(_ context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	var in struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(call.Input, &in)
	x.mu.Lock()
	x.commands = append(x.commands, in.Command)
	x.mu.Unlock()
	if x.sandbox {
		body, err := json.Marshal(map[string]any{"type": call.Name + "_result", "stdout": "out: " + in.Command + "\n", "stderr": "", "exit_code": 0})
		if err != nil {
			return nil, fmt.Errorf("llmtest: encode result: %w", err)
		}
		return wire.SandboxResult(body), nil
	}
	return &wire.ToolResult{Type: wire.ResultBash, Stdout: "out: " + in.Command + "\n"}, nil
}

// ran returns the commands run so far, in order.
func (x *executor) ran() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.commands)
}

// Building blocks of requests and scripts.

// userText returns a user message of one text block.
func userText(s string) wire.Message {
	return wire.Message{Role: wire.RoleUser, Content: []wire.ContentBlock{textBlock(s)}}
}

// textBlock returns a text block.
func textBlock(s string) wire.ContentBlock {
	return wire.ContentBlock{Type: wire.BlockText, Text: s}
}

// toolUse returns a tool_use block; input is JSON.
func toolUse(id, name, input string) wire.ContentBlock {
	return wire.ContentBlock{Type: wire.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(input)}
}

// runnerCall is the runner's n-th call: a text saying so and the bash call.
func runnerCall(n, of int, command string) []wire.ContentBlock {
	in, _ := json.Marshal(map[string]string{"command": command})
	return []wire.ContentBlock{
		textBlock(fmt.Sprintf("Running block %d of %d (bash).", n, of)),
		toolUse(fmt.Sprintf("toolu_runner_%d", n), wire.SubToolBash, string(in)),
	}
}

// reply returns a scripted answer of blocks, with usage 11 in, 5 out.
func reply(blocks ...wire.ContentBlock) fakeupstream.Reply {
	return fakeupstream.Reply{Content: blocks, Usage: wire.Usage{InputTokens: 11, OutputTokens: 5}}
}

var (
	codeExecution = wire.Tool{Type: wire.ToolTypeCodeExecution2508, Name: "code_execution"}
	weatherTool   = wire.Tool{Name: "get_weather", Description: "The weather in a city.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}
)

// stepRequest returns a step request of msgs offering tools.
func stepRequest(tools []messages.ToolDefinition, msgs ...wire.Message) messages.StepRequest {
	return messages.StepRequest{Model: "default", MaxTokens: 256, Messages: msgs, Tools: tools}
}

// checkBlocks fails unless got has the types, names and inputs of want
// (ids are not compared: the loop gives server calls its own).
func checkBlocks(t *testing.T, what string, got, want []wire.ContentBlock) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d blocks %s, want %d %s", what, len(got), describe(got), len(want), describe(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		ok := g.Type == w.Type && g.Name == w.Name
		switch w.Type {
		case wire.BlockText:
			ok = ok && (g.Text == w.Text || w.Text == "*" && strings.TrimSpace(g.Text) != "")
		case wire.BlockToolUse, wire.BlockServerToolUse:
			ok = ok && sameJSON(string(g.Input), string(w.Input)) && g.ID != ""
		}
		if !ok {
			t.Fatalf("%s: block %d is %s, want %s", what, i, describe(got[i:i+1]), describe(want[i:i+1]))
		}
	}
}

// describe renders blocks for a failure message.
func describe(blocks []wire.ContentBlock) string {
	var parts []string
	for _, b := range blocks {
		switch b.Type {
		case wire.BlockText:
			parts = append(parts, fmt.Sprintf("text %q", b.Text))
		case wire.BlockToolUse, wire.BlockServerToolUse:
			parts = append(parts, fmt.Sprintf("%s %s %s %s", b.Type, b.ID, b.Name, b.Input))
		default:
			parts = append(parts, b.Type+" for "+b.ToolUseID)
		}
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// final is the closing text after code ran: the script's, or any text for
// the runner (its summary).
func (e *env) final() string {
	if e.scripted() {
		return scriptedFinal
	}
	return "*"
}

// The cases.

// testText: a plain question gets a text answer with end_turn.
func testText(e *env) {
	e.script(reply(textBlock(runner.ConfigureHint)))
	res, err := e.step(context.Background(), e.model, stepRequest(nil, userText("Hello, who are you?")))
	if err != nil {
		e.t.Fatal(err)
	}
	checkBlocks(e.t, "answer", res.Content, []wire.ContentBlock{textBlock(runner.ConfigureHint)})
	if res.StopReason != wire.StopEndTurn {
		e.t.Errorf("stop_reason = %q, want end_turn", res.StopReason)
	}
	if res.Usage.OutputTokens <= 0 {
		e.t.Errorf("usage = %+v: no output tokens", res.Usage)
	}
	if e.scripted() && (res.Usage.InputTokens != 11 || res.Usage.OutputTokens != 5) {
		e.t.Errorf("usage = %+v, want the upstream's 11 in, 5 out", res.Usage)
	}
	if n := e.upstreamRequests(); e.scripted() && n != 1 {
		e.t.Errorf("%d upstream requests, want 1", n)
	}
}

// testToolUse: a step calling a tool ends with tool_use and the call's
// id, name and input.
func testToolUse(e *env) {
	call := runnerCall(1, 1, "echo hi")
	e.script(reply(call...))
	res, err := e.step(context.Background(), e.model, stepRequest(messages.SubToolDefinitions(), userText(oneBlock)))
	if err != nil {
		e.t.Fatal(err)
	}
	checkBlocks(e.t, "answer", res.Content, call)
	if res.StopReason != wire.StopToolUse {
		e.t.Errorf("stop_reason = %q, want tool_use", res.StopReason)
	}
	if e.scripted() && res.Content[1].ID != call[1].ID {
		e.t.Errorf("tool_use id = %q, want the upstream's %q", res.Content[1].ID, call[1].ID)
	}
}

// testToolHistory: a history of a call and its result reaches the model as
// a call and a result the provider accepts, and the model answers.
func testToolHistory(e *env) {
	call := runnerCall(1, 1, "echo hi")
	result, _ := json.Marshal(`{"type":"bash_code_execution_result","stdout":"hi\n","stderr":"","return_code":0,"content":[]}`)
	msgs := []wire.Message{
		userText(oneBlock),
		{Role: wire.RoleAssistant, Content: call},
		{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: call[1].ID, Content: result}}},
	}
	e.script(reply(textBlock(scriptedFinal)))
	res, err := e.step(context.Background(), e.model, stepRequest(messages.SubToolDefinitions(), msgs...))
	if err != nil {
		e.t.Fatal(err)
	}
	checkBlocks(e.t, "answer", res.Content, []wire.ContentBlock{textBlock(e.final())})
	if res.StopReason != wire.StopEndTurn {
		e.t.Errorf("stop_reason = %q, want end_turn", res.StopReason)
	}
	if e.scripted() {
		body := string(e.up.Requests()[0].Body)
		if n := strings.Count(body, call[1].ID); n != 2 {
			e.t.Errorf("the upstream request names the call %s %d times, want 2 (call and result): %s", call[1].ID, n, body)
		}
	}
}

// testMaxTokens: an answer cut at max_tokens says so, and a call cut at
// max_tokens is not run.
func testMaxTokens(e *env) {
	e.script(fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("The answer is cut")}, StopReason: wire.StopMaxTokens})
	res, err := e.step(context.Background(), e.model, stepRequest(nil, userText("Write a long essay.")))
	if err != nil {
		e.t.Fatal(err)
	}
	checkBlocks(e.t, "answer", res.Content, []wire.ContentBlock{textBlock("The answer is cut")})
	if res.StopReason != wire.StopMaxTokens {
		e.t.Errorf("stop_reason = %q, want max_tokens", res.StopReason)
	}

	// Cut in the middle of a call: the loop must not run what may be half
	// a command, and the client learns why the turn ended.
	e.script(fakeupstream.Reply{Content: runnerCall(1, 1, "echo hi"), StopReason: wire.StopMaxTokens})
	resp := e.create(e.loop(messages.Config{}), &wire.Request{Messages: []wire.Message{userText(oneBlock)}, Tools: []wire.Tool{codeExecution}})
	if resp.StopReason != wire.StopMaxTokens {
		e.t.Errorf("a call cut at max_tokens: stop_reason = %q, want max_tokens", resp.StopReason)
	}
	if got := e.exec.ran(); len(got) != 0 {
		e.t.Errorf("the sandbox ran %q, a call cut at max_tokens", got)
	}
}

// testStopSequence: an answer ended by a stop sequence says so and which.
func testStopSequence(e *env) {
	e.script(fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("one, two, ")}, StopReason: wire.StopSequence, StopSequence: "three"})
	req := stepRequest(nil, userText("Count to five."))
	req.StopSequences = []string{"three"}
	res, err := e.step(context.Background(), e.model, req)
	if err != nil {
		e.t.Fatal(err)
	}
	checkBlocks(e.t, "answer", res.Content, []wire.ContentBlock{textBlock("one, two, ")})
	if res.StopReason != wire.StopSequence || res.StopSequence == nil || *res.StopSequence != "three" {
		e.t.Errorf("stop_reason = %q, stop_sequence = %v; want stop_sequence \"three\"", res.StopReason, res.StopSequence)
	}
	if body := string(e.up.Requests()[0].Body); !strings.Contains(body, `["three"]`) {
		e.t.Errorf("the stop sequences did not reach the upstream: %s", body)
	}
}

// testSampling: the sampling settings a request sets reach the upstream
// under the names of its API (top_k in Anthropic's alone: OpenAI's has
// none), and those it leaves unset stay out of the body.
func testSampling(e *env) {
	send := func(req messages.StepRequest) map[string]json.RawMessage {
		e.t.Helper()
		e.script(reply(textBlock("ok")))
		n := len(e.up.Requests())
		if _, err := e.step(context.Background(), e.model, req); err != nil {
			e.t.Fatal(err)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(e.up.Requests()[n].Body, &body); err != nil {
			e.t.Fatal(err)
		}
		return body
	}
	temp, topP, topK := 0.25, 0.5, 7
	req := stepRequest(nil, userText("Pick a number."))
	req.Temperature, req.TopP, req.TopK = &temp, &topP, &topK
	want := map[string]string{"temperature": "0.25", "top_p": "0.5"}
	if e.row.Format == fakeupstream.Anthropic {
		want["top_k"] = "7"
	}
	body := send(req)
	for k, v := range want {
		if got := string(body[k]); got != v {
			e.t.Errorf("%s in the upstream's body = %q, want %s", k, got, v)
		}
	}
	body = send(stepRequest(nil, userText("Pick a number.")))
	for _, k := range []string{"temperature", "top_p", "top_k", "stop", "stop_sequences"} {
		if v, ok := body[k]; ok {
			e.t.Errorf("%s = %s in the upstream's body of a request that set none", k, v)
		}
	}
}

// testStartUsage: a streamed turn's message_start carries the input
// tokens and cache counts the upstream gave at the first step's start;
// message_delta carries the totals of the turn's two steps.
func testStartUsage(e *env) {
	if !e.stream {
		e.t.Skip("a step that does not stream has no start to report")
	}
	first := reply(runnerCall(1, 1, "echo hi")...)
	first.Usage = wire.Usage{InputTokens: 40, OutputTokens: 5, CacheCreationInputTokens: 3, CacheReadInputTokens: 20}
	second := reply(textBlock(scriptedFinal))
	second.Usage = wire.Usage{InputTokens: 60, OutputTokens: 7, CacheReadInputTokens: 20}
	e.script(first, second)
	var evs []wire.Event
	req := &wire.Request{Model: "default", MaxTokens: 1024, Stream: true, Messages: []wire.Message{userText(oneBlock)}, Tools: []wire.Tool{codeExecution}}
	err := e.loop(messages.Config{}).Run(context.Background(), req, messages.RunOptions{ContainerID: "container-1"}, messages.SinkFunc(func(ev wire.Event) error {
		evs = append(evs, ev)
		return nil
	}))
	if err != nil {
		e.t.Fatalf("loop: %v", err)
	}
	if len(evs) == 0 || evs[0].Type != wire.EventMessageStart || evs[0].Message == nil {
		e.t.Fatalf("the stream does not open with message_start: %+v", evs)
	}
	// The fake upstream's message_start counts 1 output token, as
	// Anthropic's does: the loop's passes it on.
	want := wire.Usage{InputTokens: 40, OutputTokens: 1, CacheCreationInputTokens: 3, CacheReadInputTokens: 20}
	if got := evs[0].Message.Usage; got != want {
		e.t.Errorf("message_start usage = %+v, want the first step's start as the upstream gave it %+v", got, want)
	}
	var delta *wire.Usage
	for _, ev := range evs {
		if ev.Type == wire.EventMessageDelta {
			delta = ev.Usage
		}
	}
	if delta == nil {
		e.t.Fatal("no message_delta with usage")
	}
	if delta.InputTokens != 100 || delta.OutputTokens != 12 || delta.CacheCreationInputTokens != 3 || delta.CacheReadInputTokens != 40 {
		e.t.Errorf("message_delta usage = %+v, want both steps' totals (100 in, 12 out, 3 cache creation, 40 cache read)", *delta)
	}
}

// testServerTools: through the loop, a bash call runs in the sandbox, its
// result is shown right after it and fed back, and the model closes.
func testServerTools(e *env) {
	e.script(reply(runnerCall(1, 1, "echo hi")...), reply(textBlock(scriptedFinal)))
	resp := e.create(e.loop(messages.Config{}), &wire.Request{
		Messages: []wire.Message{userText(oneBlock)}, Tools: []wire.Tool{codeExecution}})
	checkBlocks(e.t, "response", resp.Content, []wire.ContentBlock{
		textBlock("Running block 1 of 1 (bash)."),
		{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo hi"}`)},
		{Type: wire.BlockBashResult},
		textBlock(e.final()),
	})
	use, res := resp.Content[1], resp.Content[2]
	if !strings.HasPrefix(use.ID, "srvtoolu_") || res.ToolUseID != use.ID || res.Result == nil || res.Result.Stdout != "out: echo hi\n" {
		e.t.Errorf("server_tool_use %s answered by %s with %+v", use.ID, res.ToolUseID, res.Result)
	}
	if resp.StopReason != wire.StopEndTurn {
		e.t.Errorf("stop_reason = %q, want end_turn", resp.StopReason)
	}
	if resp.Usage.ServerToolUse == nil || resp.Usage.ServerToolUse.CodeExecutionRequests != 1 {
		e.t.Errorf("usage = %+v, want one code execution request", resp.Usage)
	}
	if got := e.exec.ran(); !slices.Equal(got, []string{"echo hi"}) {
		e.t.Errorf("the sandbox ran %q, want [echo hi]", got)
	}
	reqs := e.model.Requests()
	if len(reqs) != 2 {
		e.t.Fatalf("%d model steps, want 2", len(reqs))
	}
	for i, r := range reqs {
		if !offers(r, wire.SubToolBash, wire.SubToolTextEditor) {
			e.t.Errorf("step %d offers %q, want the code-execution sub-tools", i+1, toolNames(r))
		}
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != wire.RoleUser || last.Content[0].Type != wire.BlockToolResult || last.Content[0].ToolUseID != use.ID ||
		!strings.Contains(string(last.Content[0].Content), "out: echo hi") {
		e.t.Errorf("the second step ends with %s, want the call's result", describe(last.Content))
	}
	if n := e.upstreamRequests(); e.scripted() && n != 2 {
		e.t.Errorf("%d upstream requests, want 2", n)
	}
}

// testToolChoice: a tool_choice naming the code-execution tool reaches
// the model as "any tool" (the model knows only its sub-tools), one naming
// a client tool as that tool, in the upstream's own terms.
func testToolChoice(e *env) {
	tests := []struct {
		choice, step string
		wire         map[fakeupstream.Format]string
	}{
		{`{"type":"tool","name":"code_execution"}`, `{"type":"any"}`, map[fakeupstream.Format]string{
			fakeupstream.Anthropic: `"tool_choice":{"type":"any"}`, fakeupstream.OpenAI: `"tool_choice":"required"`}},
		{`{"type":"tool","name":"get_weather"}`, `{"type":"tool","name":"get_weather"}`, map[fakeupstream.Format]string{
			fakeupstream.Anthropic: `"tool_choice":{"type":"tool","name":"get_weather"}`, fakeupstream.OpenAI: `"tool_choice":{"function":{"name":"get_weather"},"type":"function"}`}},
		{`{"type":"auto"}`, `{"type":"auto"}`, map[fakeupstream.Format]string{
			fakeupstream.Anthropic: `"tool_choice":{"type":"auto"}`, fakeupstream.OpenAI: `"tool_choice":"auto"`}},
	}
	svc := e.loop(messages.Config{})
	for _, tc := range tests {
		e.script(reply(textBlock(runner.ConfigureHint)))
		before := e.upstreamRequests()
		e.create(svc, &wire.Request{Messages: []wire.Message{userText("Hello.")}, Tools: []wire.Tool{codeExecution, weatherTool},
			ToolChoice: json.RawMessage(tc.choice)})
		reqs := e.model.Requests()
		if got := string(reqs[len(reqs)-1].ToolChoice); !sameJSON(got, tc.step) {
			e.t.Errorf("tool_choice %s reached the adapter as %s, want %s", tc.choice, got, tc.step)
		}
		if e.scripted() {
			body := string(e.up.Requests()[before].Body)
			if !strings.Contains(body, tc.wire[e.row.Format]) {
				e.t.Errorf("tool_choice %s: the upstream was sent %s, want %s in it", tc.choice, body, tc.wire[e.row.Format])
			}
		}
	}
}

// testParallelServerCalls: a step calling two sub-tools at once runs both,
// in order, each result right after its call; the model then gets both
// results in one message.
func testParallelServerCalls(e *env) {
	e.script(reply(textBlock("Both at once."), toolUse("toolu_a", wire.SubToolBash, `{"command":"echo a"}`),
		toolUse("toolu_b", wire.SubToolBash, `{"command":"echo b"}`)), reply(textBlock(scriptedFinal)))
	resp := e.create(e.loop(messages.Config{}), &wire.Request{
		Messages: []wire.Message{userText("Run echo a and echo b.")}, Tools: []wire.Tool{codeExecution}})
	checkBlocks(e.t, "response", resp.Content, []wire.ContentBlock{
		textBlock("Both at once."),
		{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo a"}`)},
		{Type: wire.BlockBashResult},
		{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo b"}`)},
		{Type: wire.BlockBashResult},
		textBlock(scriptedFinal),
	})
	for i, command := range map[int]string{1: "echo a", 3: "echo b"} {
		if use, res := resp.Content[i], resp.Content[i+1]; res.ToolUseID != use.ID || res.Result == nil || res.Result.Stdout != "out: "+command+"\n" {
			e.t.Errorf("block %d: %s answered by %s", i, describe([]wire.ContentBlock{use}), describe([]wire.ContentBlock{res}))
		}
	}
	if got := e.exec.ran(); !slices.Equal(got, []string{"echo a", "echo b"}) {
		e.t.Errorf("the sandbox ran %q, want [echo a echo b]", got)
	}
	reqs := e.model.Requests()
	last := reqs[len(reqs)-1].Messages
	results := last[len(last)-1].Content
	if len(results) != 2 || results[0].ToolUseID != resp.Content[1].ID || results[1].ToolUseID != resp.Content[3].ID {
		e.t.Errorf("the model was given %s, want both results in order", describe(results))
	}
}

// testThinking: thinking blocks and their signatures stream through, and
// go back to the model unchanged before the tool call they led to, as
// providers with extended thinking require.
func testThinking(e *env) {
	think := wire.ContentBlock{Type: wire.BlockThinking, Thinking: "The user wants the output of echo hi; I will run it — 東京.", Signature: "sig-EqQBCgIYAhIM1gbcDa9GJwZA"}
	e.script(reply(think, toolUse("toolu_t", wire.SubToolBash, `{"command":"echo hi"}`)), reply(textBlock(scriptedFinal)))
	resp := e.create(e.loop(messages.Config{}), &wire.Request{Thinking: json.RawMessage(`{"type":"enabled","budget_tokens":1024}`),
		Messages: []wire.Message{userText(oneBlock)}, Tools: []wire.Tool{codeExecution}})
	checkBlocks(e.t, "response", resp.Content, []wire.ContentBlock{
		{Type: wire.BlockThinking},
		{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo hi"}`)},
		{Type: wire.BlockBashResult},
		textBlock(scriptedFinal),
	})
	if got := resp.Content[0]; got.Thinking != think.Thinking || got.Signature != think.Signature {
		e.t.Errorf("thinking %q signed %q, want the model's", got.Thinking, got.Signature)
	}
	reqs := e.model.Requests()
	if len(reqs) != 2 {
		e.t.Fatalf("%d model steps, want 2", len(reqs))
	}
	msgs := reqs[1].Messages
	sent := msgs[len(msgs)-2]
	if sent.Role != wire.RoleAssistant || len(sent.Content) < 2 || sent.Content[0].Type != wire.BlockThinking ||
		sent.Content[0].Thinking != think.Thinking || sent.Content[0].Signature != think.Signature || sent.Content[1].Type != wire.BlockToolUse {
		e.t.Errorf("the second step's assistant message is %s, want the thinking block unchanged, then the call", describe(sent.Content))
	}
	if body := string(e.up.Requests()[1].Body); !strings.Contains(body, `"budget_tokens":1024`) || !strings.Contains(body, think.Signature) {
		e.t.Errorf("the upstream was not sent the thinking setting and block: %s", body)
	}
}

// testToolFamilies: with code execution and the sandbox_v1 tools enabled,
// each call goes to its own family's executor and comes back in its own
// result block, and the model is given both results.
func testToolFamilies(e *env) {
	e.script(reply(toolUse("toolu_c", wire.SubToolBash, `{"command":"echo c"}`), toolUse("toolu_s", messages.ToolSandboxBash, `{"command":"echo s"}`)),
		reply(textBlock(scriptedFinal)))
	resp := e.create(e.loop(messages.Config{}), &wire.Request{Messages: []wire.Message{userText("Run echo c and echo s.")},
		Tools: []wire.Tool{codeExecution, {Type: wire.ToolTypeSandboxV1, Name: messages.SandboxToolName}}})
	checkBlocks(e.t, "response", resp.Content, []wire.ContentBlock{
		{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo c"}`)},
		{Type: wire.BlockBashResult},
		{Type: wire.BlockServerToolUse, Name: messages.ToolSandboxBash, Input: json.RawMessage(`{"command":"echo s"}`)},
		{Type: wire.BlockSandboxResult},
		textBlock(scriptedFinal),
	})
	if got := e.exec.ran(); !slices.Equal(got, []string{"echo c"}) {
		e.t.Errorf("code execution ran %q, want [echo c]", got)
	}
	if got := e.box.ran(); !slices.Equal(got, []string{"echo s"}) {
		e.t.Errorf("the sandbox_v1 tools ran %q, want [echo s]", got)
	}
	if res := resp.Content[3].Result; resp.Content[3].ToolUseID != resp.Content[2].ID || res == nil || !strings.Contains(string(res.Body), `"type":"sandbox_bash_result"`) {
		e.t.Errorf("the sandbox_bash call was answered by %s %+v", describe(resp.Content[3:4]), res)
	}
	reqs := e.model.Requests()
	last := reqs[len(reqs)-1]
	if !offers(last, wire.SubToolBash, wire.SubToolTextEditor, messages.ToolSandboxBash, messages.ToolEditFile) {
		e.t.Errorf("the model is offered %q", toolNames(last))
	}
	results := last.Messages[len(last.Messages)-1].Content
	if len(results) != 2 || !strings.Contains(string(results[0].Content), "out: echo c") || !strings.Contains(string(results[1].Content), "out: echo s") {
		e.t.Errorf("the model was given %s, want both results", describe(results))
	}
}

// testClientToolsMixed: a step calling a client tool beside a server call
// ends the turn with both calls; the next request, with the client's
// result, runs the server call first and gives the model both results.
func testClientToolsMixed(e *env) {
	e.script(reply(textBlock("Checking."), toolUse("toolu_srv", wire.SubToolBash, `{"command":"date"}`),
		toolUse("toolu_weather", "get_weather", `{"city":"Paris"}`)))
	svc := e.loop(messages.Config{})
	tools := []wire.Tool{codeExecution, weatherTool}
	first := e.create(svc, &wire.Request{Messages: []wire.Message{userText("What is the date and the weather in Paris?")}, Tools: tools})
	checkBlocks(e.t, "first response", first.Content, []wire.ContentBlock{
		textBlock("Checking."),
		{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"date"}`)},
		toolUse("toolu_weather", "get_weather", `{"city":"Paris"}`),
	})
	if first.StopReason != wire.StopToolUse || first.Content[2].ID != "toolu_weather" {
		e.t.Fatalf("stop_reason %q, client call %q: want tool_use and the model's id", first.StopReason, first.Content[2].ID)
	}
	if got := e.exec.ran(); len(got) != 0 {
		e.t.Fatalf("the sandbox ran %q before the client answered", got)
	}

	e.script(reply(textBlock(scriptedFinal)))
	answer, _ := json.Marshal("sunny, 21 °C")
	second := e.create(svc, &wire.Request{Tools: tools, Messages: []wire.Message{
		userText("What is the date and the weather in Paris?"),
		{Role: wire.RoleAssistant, Content: first.Content},
		{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "toolu_weather", Content: answer}}},
	}})
	checkBlocks(e.t, "second response", second.Content, []wire.ContentBlock{{Type: wire.BlockBashResult}, textBlock(scriptedFinal)})
	if second.Content[0].ToolUseID != first.Content[1].ID || second.StopReason != wire.StopEndTurn {
		e.t.Errorf("second response: result for %q, stop %q; want the pending call %q, end_turn", second.Content[0].ToolUseID, second.StopReason, first.Content[1].ID)
	}
	if got := e.exec.ran(); !slices.Equal(got, []string{"date"}) {
		e.t.Errorf("the sandbox ran %q, want [date]", got)
	}
	reqs := e.model.Requests()
	last := reqs[len(reqs)-1]
	if !offers(last, wire.SubToolBash, "get_weather") {
		e.t.Errorf("the last step offers %q", toolNames(last))
	}
	results := map[string]string{}
	for _, b := range last.Messages[len(last.Messages)-1].Content {
		if b.Type == wire.BlockToolResult {
			results[b.ToolUseID] = string(b.Content)
		}
	}
	if len(results) != 2 || !strings.Contains(results[first.Content[1].ID], "out: date") || !strings.Contains(results["toolu_weather"], "sunny") {
		e.t.Errorf("the last step's results = %v, want the server's and the client's", results)
	}
}

// testLoopPauseTurn: past MaxToolIterations the loop pauses right after a
// result; sending the paused turn back continues it, without running a
// command twice, until the model is done. The client may send the paused
// answers back as one assistant message or as one message each (the
// Anthropic API takes consecutive assistant messages as one turn).
func testLoopPauseTurn(e *env) {
	for _, separate := range []bool{false, true} {
		e.exec = &executor{}
		e.script(reply(runnerCall(1, 2, "echo one")...), reply(runnerCall(2, 2, "echo two")...), reply(textBlock(scriptedFinal)))
		svc := e.loop(messages.Config{MaxToolIterations: 1})
		history := []wire.Message{userText(twoBlocks)}
		for i, want := range []string{"echo one", "echo two"} {
			resp := e.create(svc, &wire.Request{Messages: history, Tools: []wire.Tool{codeExecution}})
			if resp.StopReason != wire.StopPauseTurn {
				e.t.Fatalf("separate=%v, request %d: stop_reason %q, want pause_turn", separate, i+1, resp.StopReason)
			}
			in, _ := json.Marshal(map[string]string{"command": want})
			checkBlocks(e.t, fmt.Sprintf("separate=%v, response %d", separate, i+1), resp.Content, []wire.ContentBlock{
				textBlock(fmt.Sprintf("Running block %d of 2 (bash).", i+1)),
				{Type: wire.BlockServerToolUse, Name: wire.SubToolBash, Input: in},
				{Type: wire.BlockBashResult},
			})
			if n := len(history); separate || n == 1 {
				history = append(history, wire.Message{Role: wire.RoleAssistant, Content: resp.Content})
			} else {
				history[n-1].Content = append(slices.Clone(history[n-1].Content), resp.Content...)
			}
		}
		resp := e.create(svc, &wire.Request{Messages: history, Tools: []wire.Tool{codeExecution}})
		checkBlocks(e.t, fmt.Sprintf("separate=%v, last response", separate), resp.Content, []wire.ContentBlock{textBlock(e.final())})
		if resp.StopReason != wire.StopEndTurn {
			e.t.Errorf("separate=%v: stop_reason = %q, want end_turn", separate, resp.StopReason)
		}
		if got := e.exec.ran(); !slices.Equal(got, []string{"echo one", "echo two"}) {
			e.t.Errorf("separate=%v: the sandbox ran %q, want [echo one echo two], each once", separate, got)
		}
	}
}

// testUpstreamPauseTurn: an upstream's own pause_turn is passed on, by the
// adapter and by the loop.
func testUpstreamPauseTurn(e *env) {
	e.script(fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("Still searching.")}, StopReason: wire.StopPauseTurn})
	res, err := e.step(context.Background(), e.model, stepRequest(nil, userText("Search the web.")))
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StopReason != wire.StopPauseTurn {
		e.t.Errorf("adapter: stop_reason = %q, want pause_turn", res.StopReason)
	}
	e.script(fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("Still searching.")}, StopReason: wire.StopPauseTurn})
	resp := e.create(e.loop(messages.Config{}), &wire.Request{Messages: []wire.Message{userText("Search the web.")}})
	checkBlocks(e.t, "response", resp.Content, []wire.ContentBlock{textBlock("Still searching.")})
	if resp.StopReason != wire.StopPauseTurn {
		e.t.Errorf("loop: stop_reason = %q, want pause_turn", resp.StopReason)
	}
}

// testHistoryWithoutTools: a history holding tool blocks of tools the
// request no longer offers (code execution switched off, a client tool
// dropped) still reaches the model as a request the provider accepts, with
// the calls readable as text.
func testHistoryWithoutTools(e *env) {
	srv := "srvtoolu_earlier"
	earlier, _ := json.Marshal("sunny")
	histories := []struct {
		name    string
		msgs    []wire.Message
		mention string
	}{
		{"code execution off", []wire.Message{
			userText(oneBlock),
			{Role: wire.RoleAssistant, Content: []wire.ContentBlock{
				textBlock("Running block 1 of 1 (bash)."),
				{Type: wire.BlockServerToolUse, ID: srv, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo hi"}`)},
				{Type: wire.BlockBashResult, ToolUseID: srv, Result: &wire.ToolResult{Type: wire.ResultBash, Stdout: "hi\n"}},
				textBlock("It printed hi."),
			}},
			userText("Thanks. And who are you?"),
		}, "echo hi"},
		{"a client tool dropped", []wire.Message{
			userText("Weather in Paris?"),
			{Role: wire.RoleAssistant, Content: []wire.ContentBlock{toolUse("toolu_w", "get_weather", `{"city":"Paris"}`)}},
			{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "toolu_w", Content: earlier}}},
			{Role: wire.RoleAssistant, Content: []wire.ContentBlock{textBlock("It is sunny.")}},
			userText("Thanks. And who are you?"),
		}, "get_weather"},
	}
	svc := e.loop(messages.Config{})
	for _, h := range histories {
		e.script(reply(textBlock(runner.ConfigureHint)))
		resp := e.create(svc, &wire.Request{Messages: h.msgs})
		checkBlocks(e.t, h.name, resp.Content, []wire.ContentBlock{textBlock(runner.ConfigureHint)})
		if resp.StopReason != wire.StopEndTurn {
			e.t.Errorf("%s: stop_reason = %q, want end_turn", h.name, resp.StopReason)
		}
		reqs := e.model.Requests()
		sent, err := wire.MarshalMessages(reqs[len(reqs)-1].Messages)
		if err != nil {
			e.t.Fatal(err)
		}
		if s := string(sent); strings.Contains(s, `"tool_use"`) || strings.Contains(s, `"tool_result"`) || !strings.Contains(s, h.mention) {
			e.t.Errorf("%s: the model was sent %s, want the calls as text naming %q", h.name, s, h.mention)
		}
	}
}

// testEmptyText: providers refuse empty text blocks, so none reaches the
// model: not from a client's history (an SDK keeps the empty text block a
// model may open its answer with), and, for rows with an upstream, not
// from the model's own empty block sent back with its call. The runner
// never answers with an empty block, so only the history part applies to
// it.
func testEmptyText(e *env) {
	svc := e.loop(messages.Config{})
	srv := "srvtoolu_earlier"
	history := []wire.Message{
		userText(oneBlock),
		{Role: wire.RoleAssistant, Content: []wire.ContentBlock{
			textBlock(""),
			{Type: wire.BlockServerToolUse, ID: srv, Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"echo hi"}`)},
			{Type: wire.BlockBashResult, ToolUseID: srv, Result: &wire.ToolResult{Type: wire.ResultBash, Stdout: "hi\n"}},
			textBlock(""),
		}},
		userText("Thanks. And who are you?"),
	}
	e.script(reply(textBlock(runner.ConfigureHint)))
	resp := e.create(svc, &wire.Request{Messages: history, Tools: []wire.Tool{codeExecution}})
	checkBlocks(e.t, "answer to a history with empty text", resp.Content, []wire.ContentBlock{textBlock(runner.ConfigureHint)})
	if e.scripted() {
		e.script(reply(textBlock(""), toolUse("toolu_e", wire.SubToolBash, `{"command":"echo hi"}`)), reply(textBlock(scriptedFinal)))
		resp = e.create(svc, &wire.Request{Messages: []wire.Message{userText(oneBlock)}, Tools: []wire.Tool{codeExecution}})
		if n := len(resp.Content); n == 0 || resp.Content[n-1].Text != scriptedFinal || resp.StopReason != wire.StopEndTurn {
			e.t.Errorf("after an empty text block and a call: %q %s", resp.StopReason, describe(resp.Content))
		}
	}
	for i, r := range e.model.Requests() {
		for j, m := range r.Messages {
			for _, b := range m.Content {
				if b.Type == wire.BlockText && b.Text == "" {
					e.t.Errorf("step %d, message %d: an empty text block reached the model", i+1, j)
				}
			}
		}
	}
}

// testRetries: an upstream's 408, 409, 429, 529 and 5xx are retried (after
// its retry-after), up to MaxRetries; then the error is reported with its
// kind. A retry-after past MaxRetryWait fails at once.
func testRetries(e *env) {
	wait := fakeupstream.RetryAfter(time.Millisecond)
	ok := reply(textBlock("ok"))
	fail := func(status int) fakeupstream.Reply {
		return fakeupstream.Reply{Status: status, Header: wait, ErrorMessage: fmt.Sprintf("scripted %d", status)}
	}
	tests := []struct {
		name     string
		replies  []fakeupstream.Reply
		requests int
		status   int    // of the UpstreamError; 0 means the step succeeds
		reported int    // the status messages.ErrorStatus answers the client with
		kind     string // and its error type
	}{
		{"429 then ok", []fakeupstream.Reply{fail(429), ok}, 2, 0, 0, ""},
		{"529 then ok", []fakeupstream.Reply{fail(529), ok}, 2, 0, 0, ""},
		{"500 then ok", []fakeupstream.Reply{fail(500), ok}, 2, 0, 0, ""},
		{"503 twice then ok", []fakeupstream.Reply{fail(503), fail(503), ok}, 3, 0, 0, ""},
		{"408 then ok", []fakeupstream.Reply{fail(408), ok}, 2, 0, 0, ""},
		{"409 then ok", []fakeupstream.Reply{fail(409), ok}, 2, 0, 0, ""},
		{"a dropped connection then ok", []fakeupstream.Reply{{Hangup: true}, ok}, 2, 0, 0, ""},
		{"429 asking to wait past MaxRetryWait", []fakeupstream.Reply{{Status: 429, Header: fakeupstream.RetryAfter(time.Hour), ErrorMessage: "scripted 429"}, ok}, 1, 429, 429, "rate_limit_error"},
		{"429 past the retries", []fakeupstream.Reply{fail(429), fail(429), fail(429), ok}, 3, 429, 429, "rate_limit_error"},
		{"529 past the retries", []fakeupstream.Reply{fail(529), fail(529), fail(529), ok}, 3, 529, 502, "api_error"},
		{"500 past the retries", []fakeupstream.Reply{fail(500), fail(500), fail(500), ok}, 3, 500, 502, "api_error"},
		{"400 is not retried", []fakeupstream.Reply{fail(400), ok}, 1, 400, 400, "invalid_request_error"},
		{"401 is not retried", []fakeupstream.Reply{fail(401), ok}, 1, 401, 502, "api_error"},
	}
	for _, tc := range tests {
		e.t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(tc.replies...)
			defer up.Close()
			sub := &env{t: t, row: e.row, stream: e.stream, up: up}
			m := sub.adapter(upstream.Config{MaxRetries: 2, MaxRetryWait: time.Second})
			start := time.Now()
			res, err := sub.step(context.Background(), m, stepRequest(nil, userText("hi")))
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the step took %v: a retry waited too long", took)
			}
			if n := len(up.Requests()); n != tc.requests {
				t.Errorf("%d upstream requests, want %d", n, tc.requests)
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				checkBlocks(t, "answer", res.Content, []wire.ContentBlock{textBlock("ok")})
				return
			}
			checkUpstreamError(t, err, tc.status, fmt.Sprintf("scripted %d", tc.status), tc.reported, tc.kind)
			if r := up.Refused(); len(r) > 0 {
				t.Errorf("refused: %q", r)
			}
		})
	}
}

// checkUpstreamError fails unless err is the upstream's error of status
// (0: mid-stream), with its message, reported to the client as
// reported/kind.
func checkUpstreamError(t *testing.T, err error, status int, message string, reported int, kind string) {
	t.Helper()
	var ue *messages.UpstreamError
	if !errors.As(err, &ue) {
		t.Fatalf("error = %v (%T), want a *messages.UpstreamError", err, err)
	}
	if ue.StatusCode != status || message != "" && !strings.Contains(ue.Message, message) {
		t.Errorf("error = %+v, want status %d and the message %q", ue, status, message)
	}
	if got, body := messages.ErrorStatus(err); got != reported || body.Type != kind {
		t.Errorf("reported as %d %s, want %d %s", got, body.Type, reported, kind)
	}
}

// testUpstreamErrors: failures that are not retried — a stream that fails
// or is cut after it started, an upstream that cannot be reached.
func testUpstreamErrors(e *env) {
	if e.stream {
		for _, tc := range []struct {
			name  string
			reply fakeupstream.Reply
		}{
			{"an error event mid-stream", fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("a long answer that fails")}, FailAfter: 3, ErrorMessage: "scripted failure"}},
			{"the connection cut mid-stream", fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("a long answer that is cut")}, CutAfter: 3}},
		} {
			e.t.Run(tc.name, func(t *testing.T) {
				up := fakeupstream.New(tc.reply, reply(textBlock("ok")))
				defer up.Close()
				sub := &env{t: t, row: e.row, stream: true, up: up}
				_, err := sub.step(context.Background(), sub.adapter(upstream.Config{MaxRetries: 2}), stepRequest(nil, userText("hi")))
				if n := len(up.Requests()); n != 1 {
					t.Errorf("%d upstream requests, want 1: a started stream is not retried", n)
				}
				checkUpstreamError(t, err, 0, "", 502, "api_error")
			})
		}
	}
	for _, tc := range []struct {
		name     string
		reply    fakeupstream.Reply
		requests int
		reported int
		kind     string
	}{
		{"a proxy's HTML error page", fakeupstream.Reply{Status: 502, Header: fakeupstream.RetryAfter(time.Millisecond),
			ErrorBody: "<html><body><h1>502 Bad Gateway</h1></body></html>"}, 3, 502, "api_error"},
		{"a plain-text 404 of a wrong base URL", fakeupstream.Reply{Status: 404, ErrorBody: "404 page not found\n"}, 1, 404, "invalid_request_error"},
	} {
		e.t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(tc.reply, tc.reply, tc.reply)
			defer up.Close()
			sub := &env{t: t, row: e.row, stream: e.stream, up: up}
			_, err := sub.step(context.Background(), sub.adapter(upstream.Config{MaxRetries: 2}), stepRequest(nil, userText("hi")))
			if n := len(up.Requests()); n != tc.requests {
				t.Errorf("%d upstream requests, want %d", n, tc.requests)
			}
			checkUpstreamError(t, err, tc.reply.Status, "", tc.reported, tc.kind)
			if _, body := messages.ErrorStatus(err); strings.TrimSpace(body.Message) == "" {
				t.Errorf("the client is told %+v: an error without a message", body)
			}
		})
	}
	e.t.Run("connections dropped past the retries", func(t *testing.T) {
		up := fakeupstream.New(fakeupstream.Reply{Hangup: true}, fakeupstream.Reply{Hangup: true}, reply(textBlock("ok")))
		defer up.Close()
		sub := &env{t: t, row: e.row, stream: e.stream, up: up}
		_, err := sub.step(context.Background(), sub.adapter(upstream.Config{MaxRetries: 1}), stepRequest(nil, userText("hi")))
		if n := len(up.Requests()); n != 2 {
			t.Errorf("%d upstream requests, want 2", n)
		}
		if !errors.Is(err, messages.ErrUpstreamUnavailable) {
			t.Fatalf("error = %v, want ErrUpstreamUnavailable", err)
		}
		if status, body := messages.ErrorStatus(err); status != 503 || body.Type != "api_error" {
			t.Errorf("reported as %d %s, want 503 api_error", status, body.Type)
		}
	})
	e.t.Run("unreachable", func(t *testing.T) {
		up := fakeupstream.New()
		up.Close() // its address now refuses connections
		sub := &env{t: t, row: e.row, stream: e.stream, up: up}
		_, err := sub.step(context.Background(), sub.adapter(upstream.Config{MaxRetries: -1}), stepRequest(nil, userText("hi")))
		if !errors.Is(err, messages.ErrUpstreamUnavailable) {
			t.Fatalf("error = %v, want ErrUpstreamUnavailable", err)
		}
		if status, body := messages.ErrorStatus(err); status != 503 || body.Type != "api_error" {
			t.Errorf("reported as %d %s, want 503 api_error", status, body.Type)
		}
	})
}

// testCancelled: a step whose request has ended fails with the context's
// error, whatever the adapter, and is not retried: cancelled before it
// starts, or past its deadline while the upstream takes its time (the
// client is then told 504).
func testCancelled(e *env) {
	e.t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := e.step(ctx, e.model, stepRequest(nil, userText("hi")))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want context.Canceled", err)
		}
		if n := e.upstreamRequests(); n != 0 {
			t.Errorf("%d upstream requests for a request already cancelled", n)
		}
	})
	e.t.Run("deadline", func(t *testing.T) {
		e.script(fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("late")}, Delay: 30 * time.Second}, reply(textBlock("ok")))
		before := e.upstreamRequests()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if !e.scripted() {
			<-ctx.Done() // the runner answers at once: let the deadline pass first
		}
		_, err := e.step(ctx, e.model, stepRequest(nil, userText("hi")))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error = %v, want context.DeadlineExceeded", err)
		}
		if status, body := messages.ErrorStatus(err); status != 504 || body.Type != "api_error" {
			t.Errorf("reported as %d %s, want 504 api_error", status, body.Type)
		}
		if n := e.upstreamRequests() - before; e.scripted() && n != 1 {
			t.Errorf("%d upstream requests, want 1: a request past its deadline is not retried", n)
		}
	})
}

// testUpstreamServerTools: the upstream's own server tools (here
// Anthropic's web search, allowed by the operator) pass through: their
// server_tool_use and result blocks reach the client as the upstream sent
// them, run nothing in the sandbox, and go back to the upstream unchanged
// when the client continues a paused turn or the conversation.
func testUpstreamServerTools(e *env) {
	var search wire.Tool
	if err := json.Unmarshal([]byte(`{"type":"web_search_20250305","name":"web_search","max_uses":3}`), &search); err != nil {
		e.t.Fatal(err)
	}
	use := wire.ContentBlock{Type: wire.BlockServerToolUse, ID: "srvtoolu_search1", Name: "web_search", Input: json.RawMessage(`{"query":"weather Paris"}`)}
	found := wire.ContentBlock{Type: "web_search_tool_result", Raw: json.RawMessage(`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_search1",` +
		`"content":[{"type":"web_search_result","url":"https://example.com/paris","title":"Paris","encrypted_content":"abc","page_age":null}]}`)}
	e.script(fakeupstream.Reply{Content: []wire.ContentBlock{textBlock("Searching."), use, found}, StopReason: wire.StopPauseTurn})
	svc := e.loop(messages.Config{AllowedToolTypes: []string{"web_search_20250305"}})
	prompt := userText("What is the weather in Paris?")
	first := e.create(svc, &wire.Request{Messages: []wire.Message{prompt}, Tools: []wire.Tool{search}})
	var problems []string
	if first.StopReason != wire.StopPauseTurn || len(first.Content) != 3 || first.Content[1].ID != use.ID ||
		first.Content[1].Type != wire.BlockServerToolUse || !sameJSON(string(first.Content[1].Input), string(use.Input)) ||
		first.Content[2].Type != "web_search_tool_result" || !strings.Contains(string(first.Content[2].Raw), "example.com/paris") {
		e.t.Fatalf("the paused answer is %q %s, want the upstream's blocks as sent", first.StopReason, describe(first.Content))
	}

	// The paused turn sent back, then a later question.
	e.script(reply(textBlock("It is sunny.")), reply(textBlock("You are welcome.")))
	history := []wire.Message{prompt, {Role: wire.RoleAssistant, Content: first.Content}}
	second := e.create(svc, &wire.Request{Messages: history, Tools: []wire.Tool{search}})
	history = append(history, wire.Message{Role: wire.RoleAssistant, Content: second.Content}, userText("Thanks."))
	third := e.create(svc, &wire.Request{Messages: history, Tools: []wire.Tool{search}})
	for i, resp := range []*wire.Response{second, third} {
		if resp.StopReason != wire.StopEndTurn || len(resp.Content) != 1 || resp.Content[0].Type != wire.BlockText {
			problems = append(problems, fmt.Sprintf("continuation %d answered %q %s, want the model's text alone", i+1, resp.StopReason, describe(resp.Content)))
		}
	}
	if got := e.exec.ran(); len(got) != 0 {
		problems = append(problems, fmt.Sprintf("the sandbox ran %q for the upstream's own tool", got))
	}
	reqs := e.up.Requests()
	for i, r := range reqs[1:] {
		body := string(r.Body)
		if !strings.Contains(body, `"type":"server_tool_use","id":"srvtoolu_search1"`) || !strings.Contains(body, `"type":"web_search_tool_result","tool_use_id":"srvtoolu_search1"`) {
			problems = append(problems, fmt.Sprintf("continuation %d did not send the search call and its result back as they were: %s", i+1, body))
		}
		if strings.Contains(body, `"tool_result"`) || strings.Contains(body, `"tool_use"`) {
			problems = append(problems, fmt.Sprintf("continuation %d sent the upstream's search as a tool_use/tool_result pair: %s", i+1, body))
		}
	}
	e.checkValid()
	if why, known := knownBugs["upstream_server_tools"]; known {
		if len(problems) == 0 {
			e.t.Fatalf("the known bug is fixed: remove upstream_server_tools from knownBugs (%s)", why)
		}
		e.t.Skipf("known bug: %s. Found: %q", why, problems)
	}
	for _, p := range problems {
		e.t.Error(p)
	}
}

// offers tells whether a step request offers every tool named.
func offers(r messages.StepRequest, names ...string) bool {
	have := toolNames(r)
	for _, n := range names {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// toolNames returns the names of the tools a step request offers.
func toolNames(r messages.StepRequest) []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Name)
	}
	return out
}
