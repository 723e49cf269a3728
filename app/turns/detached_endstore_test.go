package turns

import (
	"context"
	"testing"
	"time"

	"threadbox/app/turns/turnstest"
	"threadbox/domain/fault"
	"threadbox/domain/turn"
)

// slowEnd is the database of turnstest.Records whose write of a turn's
// end event takes a while, as a real write may.
type slowEnd struct{ *turnstest.Records }

func (s slowEnd) AppendTurnEvents(ctx context.Context, turnID string, evs []turn.Event) error {
	for _, ev := range evs {
		if ev.Type == endEvent {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s.Records.AppendTurnEvents(ctx, turnID, evs)
}

// TestTurnEndIsStoredBeforeItIsTold: a follower in the process that runs
// a failed turn learns that it ended only once its end event is stored,
// so that a client told so and following the turn again on any server
// (a reload, a reconnect) gets the same ending with its error, not a
// stream that stops without one.
func TestTurnEndIsStoredBeforeItIsTold(t *testing.T) {
	recs := turnstest.NewRecords()
	svc := New(Deps{Records: slowEnd{recs}})
	id := detach(t, svc, chatty(1, 4, nil, fault.New(fault.TooLarge, "the storage quota is used up")))
	if _, end := followAll(t, svc, "thr_1", id); end.State != turn.Failed || end.Err == nil {
		t.Fatalf("the turn ended %+v", end)
	}
	other := New(Deps{Records: recs})
	end, err := other.Follow(context.Background(), "thr_1", id, 0, func(context.Context) (bool, error) { return false, nil }, func(turn.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if end.State != turn.Failed || end.Err == nil || fault.KindOf(end.Err) != fault.TooLarge {
		t.Fatalf("followed again on another server as soon as it was told: %+v, want the failure with its error", end)
	}
}
