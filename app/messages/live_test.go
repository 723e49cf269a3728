package messages

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"threadbox/app/messages/wire"
)

// events collects what a liveOutput sends.
type events struct {
	mu  sync.Mutex
	got []wire.Event
}

func (e *events) send(ev wire.Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
	return nil
}

func (e *events) all() []wire.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]wire.Event(nil), e.got...)
}

func TestLiveOutput(t *testing.T) {
	euro := "€" // three bytes
	tests := []struct {
		name   string
		writes func(l *liveOutput, e *events)
		check  func(t *testing.T, evs []wire.Event)
	}{
		{"small chunks are coalesced", func(l *liveOutput, _ *events) {
			for range 100 {
				l.write("stdout", []byte("x"))
			}
		}, func(t *testing.T, evs []wire.Event) {
			// The first goes at once, the rest in one event.
			if len(evs) != 2 || evs[0].Output.Text != "x" || evs[1].Output.Text != strings.Repeat("x", 99) || evs[0].Output.Stream != "stdout" || evs[0].Output.ToolUseID != "srvtoolu_1" {
				t.Fatalf("%d events: %+v", len(evs), evs)
			}
		}},
		{"output after a quiet spell goes at once", func(l *liveOutput, e *events) {
			l.write("stdout", []byte("a"))
			time.Sleep(2 * liveEvery)
			l.write("stdout", []byte("b"))
			if n := len(e.all()); n != 2 {
				panic(fmt.Sprintf("%d events right after the write, want 2", n))
			}
		}, func(t *testing.T, evs []wire.Event) {
			if len(evs) != 2 || evs[1].Output.Text != "b" || evs[1].Output.ElapsedMs < 2*liveEvery.Milliseconds() {
				t.Fatalf("%d events: %+v", len(evs), evs)
			}
		}},
		{"a character split between chunks is sent whole", func(l *liveOutput, _ *events) {
			l.write("stdout", []byte("a"+euro[:1]))
			time.Sleep(2 * liveEvery)
			l.write("stdout", []byte(euro[1:]+"b"))
		}, func(t *testing.T, evs []wire.Event) {
			var b strings.Builder
			for _, ev := range evs {
				if !utf8.ValidString(ev.Output.Text) {
					t.Fatalf("invalid UTF-8 sent: %q", ev.Output.Text)
				}
				b.WriteString(ev.Output.Text)
			}
			if b.String() != "a"+euro+"b" || len(evs) != 2 || evs[0].Output.Text != "a" || evs[1].Output.Text != euro+"b" {
				t.Fatalf("sent %+v", evs)
			}
		}},
		{"a flood stops at the cap per stream", func(l *liveOutput, _ *events) {
			chunk := []byte(strings.Repeat("y", 64<<10))
			for range 40 { // 2.5 MiB
				l.write("stderr", chunk)
			}
			l.write("stdout", []byte("still"))
		}, func(t *testing.T, evs []wire.Event) {
			n := map[string]int{}
			for _, ev := range evs {
				n[ev.Output.Stream] += len(ev.Output.Text)
				if len(ev.Output.Text) > 64<<10+liveChunk {
					t.Fatalf("one event of %d bytes", len(ev.Output.Text))
				}
			}
			if n["stderr"] != liveCap || n["stdout"] != len("still") {
				t.Fatalf("sent %v", n)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e events
			l := newLiveOutput("srvtoolu_1", e.send)
			tt.writes(l, &e)
			l.close()
			l.write("stdout", []byte("after the result"))
			time.Sleep(2 * liveEvery)
			evs := e.all()
			for _, ev := range evs {
				if ev.Type != wire.EventToolOutput || ev.Output == nil || strings.Contains(ev.Output.Text, "after the result") {
					t.Fatalf("event %+v", ev)
				}
			}
			tt.check(t, evs)
		})
	}
}

// TestToolOutputEventRoundTrip: the event's JSON is its data as documented
// and decodes back to the same event.
func TestToolOutputEventRoundTrip(t *testing.T) {
	ev := wire.Event{Type: wire.EventToolOutput, Output: &wire.ToolOutput{ToolUseID: "srvtoolu_1", Stream: "stderr", Text: "oops\n", ElapsedMs: 12}}
	b, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"type":"threadbox_tool_output","tool_use_id":"srvtoolu_1","stream":"stderr","text":"oops\n","elapsed_ms":12}` {
		t.Fatalf("json %s", b)
	}
	var back wire.Event
	if err := back.UnmarshalJSON(b); err != nil || back.Type != wire.EventToolOutput || *back.Output != *ev.Output {
		t.Fatalf("decoded %+v %v", back, err)
	}
}

// outputThenBlock writes output through the call's live output, then runs
// until its context ends.
type outputThenBlock struct{ started chan struct{} }

func (o outputThenBlock) Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	call.Output("stdout", []byte("tick1\n"))
	call.Output("stderr", []byte("warn"))
	close(o.started)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStoppedCallKeepsItsOutput: a turn stopped while a command runs with
// live output ends with the call's result, shaped as a timeout with the
// output so far and StoppedNote, sent to the sink and to the tool hook.
func TestStoppedCallKeepsItsOutput(t *testing.T) {
	tools := outputThenBlock{started: make(chan struct{})}
	model := &fakeModel{steps: []*StepResult{step(wire.StopToolUse, toolUse("a", wire.SubToolBash, `{"command":"sleep"}`))}}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		col    Collector
		hooked *wire.ToolResult
	)
	opts := RunOptions{LiveOutput: true, OnToolCall: func(_ context.Context, _ ToolCall, r *wire.ToolResult) { hooked = r }}
	done := make(chan error, 1)
	go func() {
		done <- New(model, allTools(tools), Config{}).Run(ctx, request(wire.ToolTypeCodeExecution2508, user("x")), opts, &col)
	}()
	<-tools.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	var res *wire.ToolResult
	for _, b := range col.Response().Content {
		if b.Type == wire.BlockBashResult {
			res = b.Result
		}
	}
	want := wire.ToolResult{Type: wire.ResultBash, Stdout: "tick1\n", Stderr: "warn\n" + StoppedNote, ReturnCode: 124}
	if res == nil || res.Type != want.Type || res.Stdout != want.Stdout || res.Stderr != want.Stderr || res.ReturnCode != want.ReturnCode {
		t.Fatalf("the stopped call's result: %+v", res)
	}
	if hooked != res && (hooked == nil || hooked.Stderr != want.Stderr) {
		t.Fatalf("the tool hook got %+v", hooked)
	}
}
