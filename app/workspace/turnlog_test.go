package workspace

import (
	"context"
	"strings"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// chattyEngine plays a turn of one text block sent as n deltas of size
// bytes each; with hold set, it waits after the first delta until hold is
// closed.
type chattyEngine struct {
	n, size int
	hold    chan struct{}
}

func (e chattyEngine) Run(ctx context.Context, _ user.Principal, _ *wire.Request, _ messages.RunOptions, sink messages.Sink) error {
	text := wire.ContentBlock{Type: wire.BlockText, Text: ""}
	evs := []wire.Event{
		{Type: wire.EventMessageStart, Message: &wire.Response{ID: "msg_1", Type: "message", Role: "assistant"}},
		{Type: wire.EventContentBlockStart, Index: 0, ContentBlock: &text},
	}
	for i := range e.n {
		evs = append(evs, wire.Event{Type: wire.EventContentBlockDelta, Index: 0,
			Delta: &wire.BlockDelta{Type: wire.DeltaText, Text: strings.Repeat(string(rune('a'+i%26)), e.size)}})
	}
	evs = append(evs, wire.Event{Type: wire.EventContentBlockStop, Index: 0},
		wire.Event{Type: wire.EventMessageDelta, MessageDelta: &wire.MessageDelta{StopReason: "end_turn"}, Usage: &wire.Usage{}},
		wire.Event{Type: wire.EventMessageStop})
	for i, ev := range evs {
		if err := sink.Send(ev); err != nil {
			return err
		}
		if i == 2 && e.hold != nil {
			select {
			case <-e.hold:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// followAll follows a turn from the start to its end and returns its events.
func followAll(t *testing.T, svc *Service, p user.Principal, threadID, turnID string) ([]turn.Event, turns.Ending) {
	t.Helper()
	var evs []turn.Event
	end, err := svc.FollowTurn(context.Background(), p, threadID, turnID, 0, func(ev turn.Event) error {
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

// TestTurnLogIsCapped: a turn whose events pass the log's cap in bytes
// logs a truncation marker, then only the events that end the stream; the
// turn itself runs on and its stored message holds every delta.
func TestTurnLogIsCapped(t *testing.T) {
	ctx := context.Background()
	const n, size, limit = 40, 1000, 8000
	svc, st, p, th := setupWith(t, chattyEngine{n: n, size: size}, func(td *turns.Deps, _ *Deps) { td.LogMaxBytes = limit })
	tr, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := tr.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, pass := range []string{"live", "from the database"} {
		evs, end := followAll(t, svc, p, th.ID(), id)
		if end.State != turn.Done || end.Err != nil {
			t.Fatalf("%s: ended %+v", pass, end)
		}
		markers, bytes := 0, 0
		var after []string
		for _, ev := range evs {
			bytes += len(ev.Data)
			switch {
			case ev.Type == turns.LogTruncated:
				markers++
			case markers > 0:
				after = append(after, ev.Type)
			}
		}
		if markers != 1 || strings.Join(after, ",") != "message_delta,message_stop" {
			t.Fatalf("%s: %d markers, then %v", pass, markers, after)
		}
		if bytes > limit+200 {
			t.Fatalf("%s: the log holds %d bytes, cap %d", pass, bytes, limit)
		}
	}
	ms, err := st.Messages(ctx, th.ID())
	if err != nil || len(ms) != 2 || !ms[1].Complete() {
		t.Fatalf("stored messages: %d %v", len(ms), err)
	}
	if got := strings.Count(string(ms[1].Content()), strings.Repeat("a", size)); got != (n+25)/26 {
		t.Fatalf("the stored answer holds %d of the a-deltas, want %d", got, (n+25)/26)
	}
}
