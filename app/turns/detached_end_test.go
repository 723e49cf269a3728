package turns

import (
	"context"
	"errors"
	"testing"

	"threadbox/domain/turn"
)

// TestEndOf: how a detached turn's run ended, and why its context was
// cancelled, give its recorded end. A stop accepted while the turn ran
// ends it stopped even when its last step got through first (it once
// ended complete after the stop was answered "running").
func TestEndOf(t *testing.T) {
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want turn.State
	}{
		{"complete", context.Background(), nil, turn.Done},
		{"stopped, failing", cancelled(errStopRequested), context.Canceled, turn.Stopped},
		{"stopped, its last step through", cancelled(errStopRequested), nil, turn.Stopped},
		{"thread deleted", cancelled(errThreadDeleted), nil, turn.Stopped},
		{"failed", context.Background(), errors.New("boom"), turn.Failed},
		{"server stopping", cancelled(ErrServerStopping), context.Canceled, turn.Failed},
	}
	for _, tt := range tests {
		if got := endOf(tt.ctx, tt.err).State; got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
