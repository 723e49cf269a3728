// Package turn is a chat turn that runs detached from the request that
// started it: its record (who, which thread, running or how it ended,
// whether a stop was asked) and its event log, numbered from 1, that any
// number of clients replay and follow.
package turn

import (
	"context"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// State is where a turn is in its life.
type State string

// States of a turn.
const (
	Running State = "running"
	Done    State = "done"    // ended with its answer
	Stopped State = "stopped" // stopped by its owner
	Failed  State = "failed"  // ended in an error, or its server stopped mid-turn
)

// Turn is the record of a detached turn.
type Turn struct {
	org.Owned     // its id, its thread's org and owner (who started it), its start
	threadID      string
	state         State
	stopRequested bool
	endedAt       time.Time
}

// New returns a running turn of a user's thread.
func New(id, threadID, orgID, userID string, now time.Time) (Turn, error) {
	if id == "" || threadID == "" || orgID == "" || userID == "" {
		return Turn{}, fault.New(fault.Invalid, "a turn needs an id, a thread, an org and a user")
	}
	return Turn{Owned: org.Own(id, orgID, userID, now.UTC()), threadID: threadID, state: Running}, nil
}

// Restore rebuilds a turn from storage.
func Restore(id, threadID, orgID, userID string, state State, stopRequested bool, createdAt, endedAt time.Time) Turn {
	return Turn{org.Own(id, orgID, userID, createdAt), threadID, state, stopRequested, endedAt}
}

// ThreadID returns the thread the turn runs in.
func (t Turn) ThreadID() string { return t.threadID }

// State returns where the turn is.
func (t Turn) State() State { return t.state }

// StopRequested reports whether its owner asked the turn to stop.
func (t Turn) StopRequested() bool { return t.stopRequested }

// EndedAt returns when the turn ended (zero while it runs).
func (t Turn) EndedAt() time.Time { return t.endedAt }

// End returns the turn ended in state at now; ending twice keeps the
// first end.
func (t Turn) End(state State, now time.Time) Turn {
	if t.state != Running || state == Running {
		return t
	}
	t.state, t.endedAt = state, now.UTC()
	return t
}

// Event is one entry of a turn's log: a stream event as its client gets
// it (Type names it, Data is its JSON), numbered from 1 in order.
type Event struct {
	Seq  int64
	Type string
	Data []byte
}

// Repository stores turns and their event logs.
type Repository interface {
	CreateTurn(ctx context.Context, t Turn) error
	// Turn returns the turn id of a thread (not found for another
	// thread's turn).
	Turn(ctx context.Context, threadID, id string) (Turn, error)
	// RunningTurn returns the thread's turn recorded as running.
	RunningTurn(ctx context.Context, threadID string) (Turn, error)
	// EndTurn records the turn's end.
	EndTurn(ctx context.Context, t Turn) error
	// RequestStop marks a running turn as asked to stop.
	RequestStop(ctx context.Context, id string) error
	// AppendTurnEvents adds events to a turn's log.
	AppendTurnEvents(ctx context.Context, turnID string, evs []Event) error
	// TurnEvents returns up to limit events of a turn's log after seq after.
	TurnEvents(ctx context.Context, turnID string, after int64, limit int) ([]Event, error)
	// PruneTurns deletes the turns (and logs) that ended before t.
	PruneTurns(ctx context.Context, endedBefore time.Time) (int64, error)
}
