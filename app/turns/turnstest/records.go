// Package turnstest holds in-memory stand-ins for the turn log's ports,
// for the tests of the use cases that run turns.
package turnstest

import (
	"context"
	"sync"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/turn"
)

// Records keeps turns and their logs in memory, as the database does: the
// turn log's records for use-case tests.
type Records struct {
	mu     sync.Mutex
	turns  map[string]turn.Turn
	events map[string][]turn.Event
}

// NewRecords returns empty records.
func NewRecords() *Records {
	return &Records{turns: map[string]turn.Turn{}, events: map[string][]turn.Event{}}
}

// CreateTurn stores a new turn.
func (m *Records) CreateTurn(_ context.Context, t turn.Turn) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turns[t.ID()] = t
	return nil
}

// Turn returns the thread's turn id, or a not-found fault.
func (m *Records) Turn(_ context.Context, threadID, id string) (turn.Turn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.turns[id]; ok && t.ThreadID() == threadID {
		return t, nil
	}
	return turn.Turn{}, fault.New(fault.NotFound, "turn not found")
}

// RunningTurn returns the turn running in the thread, or a not-found fault.
func (m *Records) RunningTurn(_ context.Context, threadID string) (turn.Turn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.turns {
		if t.ThreadID() == threadID && t.State() == turn.Running {
			return t, nil
		}
	}
	return turn.Turn{}, fault.New(fault.NotFound, "no turn runs in this thread")
}

// EndTurn stores the turn's end.
func (m *Records) EndTurn(_ context.Context, t turn.Turn) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turns[t.ID()] = t
	return nil
}

// RequestStop marks the turn as asked to stop.
func (m *Records) RequestStop(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[id]
	m.turns[id] = turn.Restore(t.ID(), t.ThreadID(), t.OrgID(), t.OwnerID(), t.State(), true, t.CreatedAt(), t.EndedAt())
	return nil
}

// AppendTurnEvents appends events to the turn's log.
func (m *Records) AppendTurnEvents(_ context.Context, turnID string, evs []turn.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events[turnID] = append(m.events[turnID], evs...)
	return nil
}

// TurnEvents returns up to limit events after the given number.
func (m *Records) TurnEvents(_ context.Context, turnID string, after int64, limit int) ([]turn.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []turn.Event
	for _, ev := range m.events[turnID] {
		if ev.Seq > after && len(out) < limit {
			out = append(out, ev)
		}
	}
	return out, nil
}

// PruneTurns removes nothing.
func (m *Records) PruneTurns(context.Context, time.Time) (int64, error) { return 0, nil }
