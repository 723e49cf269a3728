package messages

import (
	"context"
	"errors"
	"strings"
	"testing"

	"threadbox/app/messages/wire"
)

// errClientGone is what a sink whose client went away answers.
var errClientGone = errors.New("the client went away")

// goneSink is a client that goes away at the first content block.
type goneSink struct{}

func (goneSink) Send(ev wire.Event) error {
	if ev.Type == wire.EventContentBlockStart {
		return errClientGone
	}
	return nil
}

// heldModel is startModel whose every block event comes with More, so
// the whole step is held until its end.
type heldModel struct{ startModel }

func (m heldModel) StreamStep(ctx context.Context, req StepRequest, emit func(StepEvent) error) (*StepResult, error) {
	return m.startModel.StreamStep(ctx, req, func(ev StepEvent) error {
		ev.More = ev.Kind != StepStart
		return emit(ev)
	})
}

// flushFailsSink holds events and fails to write them out.
type flushFailsSink struct{}

func (flushFailsSink) Send(wire.Event) error { return nil }
func (flushFailsSink) Hold(wire.Event) error { return nil }
func (flushFailsSink) Flush() error          { return errClientGone }

// TestCutStepIsMetered: a streamed step whose client goes away counts the
// input tokens its start reported (its output is not known), and a step
// that ended upstream before the client went away counts all its tokens.
func TestCutStepIsMetered(t *testing.T) {
	first := func() []*StepResult {
		s := step(wire.StopEndTurn, text("Hello there."))
		s.Usage = wire.Usage{InputTokens: 40, OutputTokens: 5}
		return []*StepResult{s}
	}
	opts := RunOptions{ContainerID: "c1", Container: testContainer, OrgID: "o1", UserID: "u1"}
	for _, tc := range []struct {
		name  string
		model Model
		sink  Sink
		want  string
	}{
		{"cut while it streams", startModel{fakeModel: &fakeModel{steps: first()}}, goneSink{}, "o1/u1/c1 in=40 out=0"},
		{"cut after it ended", heldModel{startModel{fakeModel: &fakeModel{steps: first()}}}, flushFailsSink{}, "o1/u1/c1 in=40 out=5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &fakeTokenMeter{}
			req := request(wire.ToolTypeCodeExecution2508, user("go"))
			req.Stream = true
			err := New(tc.model, allTools(&fakeTools{}), Config{Tokens: m}).Run(context.Background(), req, opts, tc.sink)
			if !errors.Is(err, errClientGone) {
				t.Fatalf("the turn ended with %v, want the client gone", err)
			}
			if got := strings.Join(m.steps, ", "); got != tc.want {
				t.Fatalf("metered %q, want %q", got, tc.want)
			}
		})
	}
}
