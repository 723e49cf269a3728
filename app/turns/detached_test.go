package turns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns/turnstest"
	"threadbox/domain/fault"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// chatty plays a turn of one text block sent as n deltas of size bytes
// each, then fails with fail (nil: ends the turn); with hold set, it waits
// after the first delta until hold is closed.
func chatty(n, size int, hold chan struct{}, fail error) func(context.Context, messages.Sink) error {
	return func(ctx context.Context, sink messages.Sink) error {
		text := wire.ContentBlock{Type: wire.BlockText, Text: ""}
		evs := []wire.Event{
			{Type: wire.EventMessageStart, Message: &wire.Response{ID: "msg_1", Type: "message", Role: "assistant"}},
			{Type: wire.EventContentBlockStart, Index: 0, ContentBlock: &text},
		}
		for i := range n {
			evs = append(evs, wire.Event{Type: wire.EventContentBlockDelta, Index: 0,
				Delta: &wire.BlockDelta{Type: wire.DeltaText, Text: strings.Repeat(string(rune('a'+i%26)), size)}})
		}
		if fail == nil {
			evs = append(evs, wire.Event{Type: wire.EventContentBlockStop, Index: 0},
				wire.Event{Type: wire.EventMessageDelta, MessageDelta: &wire.MessageDelta{StopReason: "end_turn"}, Usage: &wire.Usage{}},
				wire.Event{Type: wire.EventMessageStop})
		}
		for i, ev := range evs {
			if err := sink.Send(ev); err != nil {
				return err
			}
			if i == 2 && hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return fail
	}
}

var owner = user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}

// detach runs run detached as a turn of thread thr_1.
func detach(t *testing.T, svc *Service, run func(context.Context, messages.Sink) error) string {
	t.Helper()
	id, err := svc.Detach(context.Background(), Detached{ThreadID: "thr_1", P: owner, Run: run, Release: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// heldWhileRunning says a turn of the thread runs while svc runs one.
func heldWhileRunning(svc *Service) Held {
	return func(context.Context) (bool, error) {
		svc.detached.mu.Lock()
		defer svc.detached.mu.Unlock()
		return len(svc.detached.live) > 0, nil
	}
}

// followAll follows a turn from the start to its end and returns its events.
func followAll(t *testing.T, svc *Service, threadID, turnID string) ([]turn.Event, Ending) {
	t.Helper()
	var evs []turn.Event
	end, err := svc.Follow(context.Background(), threadID, turnID, 0, heldWhileRunning(svc), func(ev turn.Event) error {
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i)+1 {
			t.Fatalf("event %d is numbered %d", i+1, ev.Seq)
		}
	}
	return evs, end
}

// TestRunningTurnKeepsOnlyUnstoredEvents: the events of a running turn are
// dropped from memory once stored, and a follower that starts from the
// beginning reads them from the database, then follows live.
func TestRunningTurnKeepsOnlyUnstoredEvents(t *testing.T) {
	hold := make(chan struct{})
	svc := New(Deps{Records: turnstest.NewRecords()})
	id := detach(t, svc, chatty(3, 10, hold, nil))
	l := svc.detached.get(id)
	if l == nil {
		t.Fatal("the running turn is not in this process")
	}
	// The turn waits after its third event until hold closes; the watch
	// stores what it sent.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		stored, inMemory := l.stored, len(l.events)
		l.mu.Unlock()
		if stored == 3 {
			if inMemory != 0 {
				t.Fatalf("%d stored events still in memory", inMemory)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn's first events were not stored (stored %d)", stored)
		}
	}
	type result struct {
		evs []turn.Event
		end Ending
	}
	done := make(chan result, 1)
	go func() {
		evs, end := followAll(t, svc, "thr_1", id)
		done <- result{evs, end}
	}()
	close(hold)
	r := <-done
	if r.end.State != turn.Done || len(r.evs) != 8 || r.evs[0].Type != wire.EventMessageStart || r.evs[7].Type != wire.EventMessageStop {
		t.Fatalf("followed %d events, ended %+v", len(r.evs), r.end)
	}
}

// TestFailedTurnEndKeepsItsKind: a failed turn's log ends with the
// failure's kind and the message its client was told, never an HTTP
// status nor an internal cause; a follower on another server (reading the
// database) gets an error of that kind and message, which the web layer's
// one mapper answers as the turn's own client was answered.
func TestFailedTurnEndKeepsItsKind(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kind fault.Kind
		msg  string
	}{
		{"an overloaded upstream", &messages.UpstreamError{StatusCode: 529, Type: "overloaded_error", Message: "Overloaded"}, fault.Upstream, "Overloaded"},
		{"a rate-limited upstream", &messages.UpstreamError{StatusCode: 429, Type: "rate_limit_error", Message: "slow down"}, fault.RateLimited, "slow down"},
		{"an unreachable upstream", fmt.Errorf("step: %w", messages.ErrUpstreamUnavailable), fault.Unavailable, "The model upstream is unavailable."},
		{"a deadline", fmt.Errorf("step: %w", context.DeadlineExceeded), fault.Timeout, "The request timed out."},
		{"a fault", fault.New(fault.TooLarge, "the storage quota is used up"), fault.TooLarge, "the storage quota is used up"},
		{"an internal error", errors.New("open /var/lib/threadbox/x: no space left"), fault.Internal, "Internal server error."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs := turnstest.NewRecords()
			svc := New(Deps{Records: recs})
			id := detach(t, svc, chatty(1, 4, nil, tc.err))
			if _, end := followAll(t, svc, "thr_1", id); end.State != turn.Failed || end.Err == nil {
				t.Fatalf("the turn ended %+v", end)
			}
			evs, _ := recs.TurnEvents(context.Background(), id, 0, 100)
			last := evs[len(evs)-1]
			var stored map[string]any
			if err := json.Unmarshal(last.Data, &stored); err != nil || last.Type != endEvent {
				t.Fatalf("the log ends with %s %s", last.Type, last.Data)
			}
			if len(stored) != 3 || stored["state"] != string(turn.Failed) || stored["kind"] != string(tc.kind) || stored["message"] != tc.msg {
				t.Fatalf("the log's end is %s, want its state, kind %s and message %q alone", last.Data, tc.kind, tc.msg)
			}
			other := New(Deps{Records: recs})
			_, end := followAll(t, other, "thr_1", id)
			if end.State != turn.Failed || fault.KindOf(end.Err) != tc.kind || fault.MessageOf(end.Err) != tc.msg {
				t.Fatalf("followed from the database: %+v (%s %q), want %s %q", end, fault.KindOf(end.Err), fault.MessageOf(end.Err), tc.kind, tc.msg)
			}
		})
	}
}
