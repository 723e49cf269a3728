package turns

import (
	"context"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/turns/turnstest"
	"threadbox/domain/fault"
)

// TestNoTurnStartsOnceTheServerStops: the server goes on serving while
// StopDetached waits for the running turns, so a chat turn may still be
// sent to it; one sent then is refused as unavailable (its client sends
// it again, to a server that stays) and its thread released, rather than
// started where nothing ends it before the process exits.
func TestNoTurnStartsOnceTheServerStops(t *testing.T) {
	svc := New(Deps{Records: turnstest.NewRecords()})
	stopped, stop := context.WithCancel(context.Background())
	stop()
	svc.StopDetached(stopped)

	released := make(chan struct{})
	_, err := svc.Detach(context.Background(), Detached{ThreadID: "thr_1", P: owner,
		Run: func(ctx context.Context, sink messages.Sink) error {
			<-ctx.Done()
			return context.Cause(ctx)
		},
		Release: func() { close(released) },
	})
	if err == nil {
		select {
		case <-released:
			return // ended at once, as the server stopping ends a turn
		case <-time.After(10 * time.Second):
			t.Fatal("a turn started after StopDetached ran on: nothing ends it before the process exits")
		}
	}
	if !fault.Is(err, fault.Unavailable) {
		t.Fatalf("a turn sent to a stopping server: %v, want unavailable", err)
	}
	select {
	case <-released:
	default:
		t.Fatal("the refused turn's thread was not released")
	}
}
