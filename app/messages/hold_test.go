package messages

import (
	"context"
	"encoding/json"
	"testing"

	"threadbox/app/messages/wire"
)

// burstModel is fakeModel whose events all come in one burst per block: a
// block's start and deltas carry More, its stop does not. Before it goes
// on after an event without More (where a real upstream may make it
// wait), it calls waits.
type burstModel struct {
	*fakeModel
	waits func()
}

func (m burstModel) StreamStep(ctx context.Context, req StepRequest, emit func(StepEvent) error) (*StepResult, error) {
	return m.fakeModel.StreamStep(ctx, req, func(ev StepEvent) error {
		ev.More = ev.Kind != StepBlockStop
		if err := emit(ev); err != nil {
			return err
		}
		if !ev.More {
			m.waits()
		}
		return nil
	})
}

// holdingSink records what reached the client (sent) and what is written
// but held (held).
type holdingSink struct {
	sent, held []wire.Event
}

func (s *holdingSink) Send(ev wire.Event) error {
	s.sent = append(append(s.sent, s.held...), ev)
	s.held = nil
	return nil
}

func (s *holdingSink) Hold(ev wire.Event) error {
	s.held = append(s.held, ev)
	return nil
}

func (s *holdingSink) Flush() error {
	s.sent = append(s.sent, s.held...)
	s.held = nil
	return nil
}

// waitTools checks nothing is held whenever a tool runs.
type waitTools struct {
	fakeTools
	check func()
}

func (w *waitTools) Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	w.check()
	return w.fakeTools.Execute(ctx, call)
}

// TestHeldEventsGoOutBeforeWaits checks a turn's bursts: the events of a
// burst may be held, but nothing is held while the model may wait for its
// upstream, while a tool runs or once the turn ended, and the client gets
// the same events as a sink that sends each at once.
func TestHeldEventsGoOutBeforeWaits(t *testing.T) {
	script := func() []*StepResult {
		return []*StepResult{
			step(wire.StopToolUse, text("Let me check."), toolUse("toolu_a", wire.SubToolBash, `{"command":"ls"}`), text("And after.")),
			step(wire.StopEndTurn, text("Done.")),
		}
	}
	req := request(wire.ToolTypeCodeExecution2508, user("go"))
	req.Stream = true
	opts := RunOptions{Container: testContainer, ContainerID: "c1"}

	var plain []wire.Event
	if err := New(&fakeModel{steps: script()}, allTools(&fakeTools{}), Config{}).Run(context.Background(), req, opts, SinkFunc(func(ev wire.Event) error {
		plain = append(plain, ev)
		return nil
	})); err != nil {
		t.Fatal(err)
	}

	sink := &holdingSink{}
	checks, holds := 0, 0
	nothingHeld := func() {
		checks++
		if len(sink.held) > 0 {
			t.Fatalf("%d events held while the turn may wait: %+v", len(sink.held), sink.held)
		}
	}
	model := burstModel{fakeModel: &fakeModel{steps: script()}, waits: nothingHeld}
	tools := &waitTools{check: nothingHeld}
	counting := &countingSink{holdingSink: sink, holds: &holds}
	r2 := *req
	if err := New(model, allTools(tools), Config{}).Run(context.Background(), &r2, opts, counting); err != nil {
		t.Fatal(err)
	}
	nothingHeld()
	if holds == 0 || checks < 3 {
		t.Fatalf("%d events held, %d checks: the test did not exercise holding", holds, checks)
	}
	a, _ := json.Marshal(plain)
	b, _ := json.Marshal(sink.sent)
	if mask(string(a)) != mask(string(b)) {
		t.Fatalf("events differ:\nsent at once %s\nheld         %s", a, b)
	}
}

// countingSink counts the events held.
type countingSink struct {
	*holdingSink
	holds *int
}

func (c *countingSink) Hold(ev wire.Event) error {
	*c.holds++
	return c.holdingSink.Hold(ev)
}
