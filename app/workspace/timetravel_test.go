package workspace

import (
	"testing"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/thread"
)

// TestTurnAt: a rewind or a fork goes back to an assistant message of the
// thread's history; a user message, an earlier version or another
// thread's message is refused with its own kind.
func TestTurnAt(t *testing.T) {
	at := time.Unix(0, 0)
	msg := func(id string, role thread.Role, replaced bool) thread.Message {
		return thread.RestoreMessage(id, "thr_a", 0, role, []byte("[]"), nil, true, at, thread.Ending{}).WithReplaced(replaced)
	}
	msgs := []thread.Message{
		msg("u1", thread.User, false), msg("a1", thread.Assistant, false),
		msg("u2", thread.User, true), msg("a2", thread.Assistant, true),
		msg("u3", thread.User, false), msg("a3", thread.Assistant, false),
	}
	for _, tc := range []struct {
		id   string
		want int
		kind fault.Kind
	}{
		{"a1", 1, ""},
		{"a3", 5, ""},
		{"", 0, fault.Invalid},
		{"u1", 0, fault.Invalid},
		{"a2", 0, fault.Conflict},
		{"other", 0, fault.NotFound},
	} {
		got, err := turnAt(msgs, tc.id)
		if tc.kind != "" {
			if !fault.Is(err, tc.kind) {
				t.Errorf("turnAt(%q) err = %v, want %s", tc.id, err, tc.kind)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("turnAt(%q) = %d, %v, want %d", tc.id, got, err, tc.want)
		}
	}
}
