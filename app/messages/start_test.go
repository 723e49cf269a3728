package messages

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages/wire"
)

// startModel is fakeModel whose streamed steps first report their start
// with the step's input tokens and 1 output token, as the Anthropic
// adapter does. Before it starts, it calls waits when set.
type startModel struct {
	*fakeModel
	waits func() error
}

func (m startModel) StreamStep(ctx context.Context, req StepRequest, emit func(StepEvent) error) (*StepResult, error) {
	if m.waits != nil {
		if err := m.waits(); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	var u wire.Usage
	if len(m.steps) > 0 {
		u = m.steps[0].Usage
		u.OutputTokens = min(u.OutputTokens, 1)
	}
	m.mu.Unlock()
	if err := emit(StepEvent{Kind: StepStart, Usage: u}); err != nil {
		return nil, err
	}
	return m.fakeModel.StreamStep(ctx, req, emit)
}

// streamTurn runs a streamed request and returns its events.
func streamTurn(t *testing.T, model Model, cfg Config) ([]wire.Event, error) {
	t.Helper()
	req := request(wire.ToolTypeCodeExecution2508, user("go"))
	req.Stream = true
	var (
		mu  sync.Mutex
		evs []wire.Event
	)
	err := New(model, allTools(&fakeTools{}), cfg).Run(context.Background(), req, RunOptions{}, SinkFunc(func(ev wire.Event) error {
		mu.Lock()
		defer mu.Unlock()
		evs = append(evs, ev)
		return nil
	}))
	mu.Lock()
	defer mu.Unlock()
	return evs, err
}

// TestMessageStartCarriesFirstStepInput: a streamed turn's message_start
// carries the first step's usage as the model reported it at the step's
// start (its input side, and the output counted there, as Anthropic's
// message_start counts it); message_delta carries the totals of every
// step.
func TestMessageStartCarriesFirstStepInput(t *testing.T) {
	first := step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"ls"}`))
	first.Usage = wire.Usage{InputTokens: 40, OutputTokens: 5, CacheCreationInputTokens: 3, CacheReadInputTokens: 20}
	second := step(wire.StopEndTurn, text("Done."))
	second.Usage = wire.Usage{InputTokens: 60, OutputTokens: 7, CacheReadInputTokens: 20}
	evs, err := streamTurn(t, startModel{fakeModel: &fakeModel{steps: []*StepResult{first, second}}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != wire.EventMessageStart || evs[1].Type != wire.EventPing {
		t.Fatalf("the stream opens with %s, %s", evs[0].Type, evs[1].Type)
	}
	if got, want := evs[0].Message.Usage, (wire.Usage{InputTokens: 40, OutputTokens: 1, CacheCreationInputTokens: 3, CacheReadInputTokens: 20}); got != want {
		t.Fatalf("message_start usage %+v, want %+v", got, want)
	}
	d := evs[len(evs)-2]
	if d.Type != wire.EventMessageDelta || d.Usage.InputTokens != 100 || d.Usage.OutputTokens != 12 || d.Usage.CacheCreationInputTokens != 3 || d.Usage.CacheReadInputTokens != 40 {
		t.Fatalf("message_delta %+v usage %+v, want the totals", d, d.Usage)
	}
}

// TestMessageStartAfterStartWait: a model that has not started its first
// step within StartWait gets message_start sent without input tokens,
// once, so that a stream opened meanwhile opens with it.
func TestMessageStartAfterStartWait(t *testing.T) {
	var model startModel
	var evs []wire.Event
	opened := make(chan struct{})
	model.fakeModel = &fakeModel{steps: []*StepResult{step(wire.StopEndTurn, text("Hello."))}}
	model.waits = func() error {
		// The step starts only after message_start was sent.
		select {
		case <-opened:
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("no message_start while the model waited")
		}
	}
	req := request("", user("go"))
	req.Stream = true
	var once sync.Once
	err := New(model, Tools{}, Config{StartWait: time.Millisecond}).Run(context.Background(), req, RunOptions{}, SinkFunc(func(ev wire.Event) error {
		evs = append(evs, ev)
		if ev.Type == wire.EventPing {
			once.Do(func() { close(opened) })
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, ev := range evs {
		if ev.Type == wire.EventMessageStart {
			starts++
		}
	}
	if evs[0].Type != wire.EventMessageStart || starts != 1 || evs[0].Message.Usage.InputTokens != 0 {
		t.Fatalf("%d message_start events, the first event %s %+v", starts, evs[0].Type, evs[0].Message)
	}
}

// TestMessageStartBeforeFailure: a streamed turn whose first step fails
// before it started still opens with message_start.
func TestMessageStartBeforeFailure(t *testing.T) {
	model := &fakeModel{err: &UpstreamError{StatusCode: 529, Type: "overloaded_error", Message: "Overloaded"}}
	evs, err := streamTurn(t, model, Config{})
	if err == nil || len(evs) != 2 || evs[0].Type != wire.EventMessageStart || evs[1].Type != wire.EventPing {
		t.Fatalf("err %v, events %+v", err, evs)
	}
}

// resumingCells answers a resumed cell with its output, or, with again,
// pauses it on get_weather once more.
type resumingCells struct{ again bool }

func (c resumingCells) Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	if call.Resume == nil {
		return nil, errors.New("a cell ran that was not resumed")
	}
	if c.again {
		return pausingCells{}.Execute(ctx, call)
	}
	return &wire.ToolResult{Type: wire.ResultCodeExecution, Stdout: "sunny\n", Files: []wire.OutputFile{}}, nil
}

// resumeRequest is a streamed request that answers the get_weather call a
// paused cell made.
func resumeRequest() *wire.Request {
	weather := wire.Tool{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`), AllowedCallers: []string{wire.ToolTypeCodeExecution2601}}
	req := request(wire.ToolTypeCodeExecution2601, user("go"),
		wire.Message{Role: wire.RoleAssistant, Content: []wire.ContentBlock{
			{Type: wire.BlockServerToolUse, ID: "srvtoolu_cell", Name: SubToolCodeExecution, Input: json.RawMessage(`{"code":"print(await get_weather())"}`)},
			{Type: wire.BlockToolUse, ID: "toolu_w", Name: "get_weather", Input: json.RawMessage(`{}`), Caller: &wire.Caller{Type: wire.ToolTypeCodeExecution2601, ToolID: "srvtoolu_cell"}},
		}},
		wire.Message{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "toolu_w", Content: json.RawMessage(`"sunny"`)}}})
	req.Tools = append(req.Tools, weather)
	req.Container = &wire.ContainerParam{ID: testContainer.ID}
	req.Stream = true
	return req
}

// TestMessageStartOfResumedCell: a turn that begins by resuming a paused
// cell opens with message_start carrying its first step's input tokens,
// the cell's result after it; one that makes no step (the cell paused
// again) opens with message_start without counts when it ends, without
// waiting for StartWait.
func TestMessageStartOfResumedCell(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again bool
		want  wire.Usage
	}{
		{"first step's input", false, wire.Usage{InputTokens: 40, OutputTokens: 1, CacheReadInputTokens: 20}},
		{"no step", true, wire.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := step(wire.StopEndTurn, text("Sunny."))
			first.Usage = wire.Usage{InputTokens: 40, OutputTokens: 5, CacheReadInputTokens: 20}
			model := startModel{fakeModel: &fakeModel{steps: []*StepResult{first}}}
			var evs []wire.Event
			svc := New(model, allTools(resumingCells{again: tc.again}), Config{StartWait: time.Hour})
			err := svc.Run(context.Background(), resumeRequest(), RunOptions{Container: testContainer}, SinkFunc(func(ev wire.Event) error {
				evs = append(evs, ev)
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) < 4 || evs[0].Type != wire.EventMessageStart || evs[1].Type != wire.EventPing {
				t.Fatalf("the stream opens with %+v", evs)
			}
			if got := evs[0].Message.Usage; got != tc.want {
				t.Fatalf("message_start usage %+v, want %+v", got, tc.want)
			}
			if b := evs[2].ContentBlock; evs[2].Type != wire.EventContentBlockStart || b == nil {
				t.Fatalf("after the start: %+v", evs[2])
			}
			if last := evs[len(evs)-1]; last.Type != wire.EventMessageStop {
				t.Fatalf("the stream ends with %s", last.Type)
			}
			want := wire.BlockCodeExecutionResult
			if tc.again {
				want = wire.BlockToolUse
			}
			if got := evs[2].ContentBlock.Type; got != want {
				t.Fatalf("the first block is %s, want %s", got, want)
			}
		})
	}
}
