package store

import (
	"context"
	"time"

	"gorm.io/gorm/clause"

	"threadbox/domain/turn"
)

var _ turn.Repository = Turns{}

type turnRow struct {
	ID            string `gorm:"primaryKey"`
	ThreadID      string
	OrgID         string
	UserID        string
	State         string
	StopRequested bool
	CreatedAt     time.Time
	EndedAt       *time.Time
}

func (turnRow) TableName() string { return "turns" }

func (r turnRow) domain() turn.Turn {
	var ended time.Time
	if r.EndedAt != nil {
		ended = r.EndedAt.UTC()
	}
	return turn.Restore(r.ID, r.ThreadID, r.OrgID, r.UserID, turn.State(r.State), r.StopRequested, r.CreatedAt.UTC(), ended)
}

type turnEventRow struct {
	TurnID string `gorm:"primaryKey"`
	Seq    int64  `gorm:"primaryKey"`
	Type   string
	Data   string
}

func (turnEventRow) TableName() string { return "turn_events" }

func (r turnEventRow) domain() turn.Event {
	return turn.Event{Seq: r.Seq, Type: r.Type, Data: []byte(r.Data)}
}

// CreateTurn stores a new turn.
func (s Turns) CreateTurn(ctx context.Context, t turn.Turn) error {
	r := turnRow{ID: t.ID(), ThreadID: t.ThreadID(), OrgID: t.OrgID(), UserID: t.OwnerID(), State: string(t.State()), StopRequested: t.StopRequested(), CreatedAt: t.CreatedAt()}
	return translate(s.q(ctx).Create(&r).Error, "turn")
}

// Turn returns the turn id of the thread threadID.
func (s Turns) Turn(ctx context.Context, threadID, id string) (turn.Turn, error) {
	return take[turnRow](s.q(ctx).Where("id = ? AND thread_id = ?", id, threadID), "turn")
}

// RunningTurn returns the thread's turn recorded as running (not found
// when none is).
func (s Turns) RunningTurn(ctx context.Context, threadID string) (turn.Turn, error) {
	return take[turnRow](s.q(ctx).Where("thread_id = ? AND state = ?", threadID, string(turn.Running)).Order("created_at DESC"), "turn")
}

// EndTurn records a turn's end (its state and end time).
func (s Turns) EndTurn(ctx context.Context, t turn.Turn) error {
	ended := t.EndedAt()
	return one(s.q(ctx).Model(&turnRow{}).Where("id = ?", t.ID()).Updates(map[string]any{"state": string(t.State()), "ended_at": &ended}), "turn")
}

// RequestStop marks a running turn as asked to stop; a turn that ended is
// left as it is.
func (s Turns) RequestStop(ctx context.Context, id string) error {
	return translate(s.q(ctx).Model(&turnRow{}).Where("id = ? AND state = ?", id, string(turn.Running)).Update("stop_requested", true).Error, "turn")
}

// AppendTurnEvents adds events to a turn's log; an event already stored
// (the same seq) is kept as it was.
func (s Turns) AppendTurnEvents(ctx context.Context, turnID string, evs []turn.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows := make([]turnEventRow, len(evs))
	for i, ev := range evs {
		rows[i] = turnEventRow{TurnID: turnID, Seq: ev.Seq, Type: ev.Type, Data: string(ev.Data)}
	}
	return translate(s.q(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&rows, 200).Error, "turn events")
}

// TurnEvents returns up to limit events of a turn's log after seq after,
// in order.
func (s Turns) TurnEvents(ctx context.Context, turnID string, after int64, limit int) ([]turn.Event, error) {
	return find[turnEventRow](s.q(ctx).Where("turn_id = ? AND seq > ?", turnID, after).Order("seq").Limit(limit), "turn events")
}

// PruneTurns deletes the turns that ended before endedBefore, with their
// logs.
func (s Turns) PruneTurns(ctx context.Context, endedBefore time.Time) (int64, error) {
	res := s.q(ctx).Where("ended_at IS NOT NULL AND ended_at < ?", endedBefore.UTC()).Delete(&turnRow{})
	return res.RowsAffected, translate(res.Error, "turns")
}
