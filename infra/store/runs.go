package store

import (
	"context"
	"time"

	"threadbox/app/usage"
)

// Command runs (app/usage.Runs): one row per command while it runs, so
// that the commands of a server that dies are still metered.

var _ usage.Runs = Usage{}

// runRow is a row of command_runs.
type runRow struct {
	ID          string `gorm:"primaryKey"`
	OrgID       string
	UserID      string
	ContainerID string
	ThreadID    string
	Holder      string
	StartedAt   time.Time
	SeenAt      time.Time
}

func (runRow) TableName() string { return "command_runs" }

// StartRun records a run.
func (s Usage) StartRun(ctx context.Context, r usage.Run) error {
	row := runRow{r.ID, r.OrgID, r.UserID, r.ContainerID, r.ThreadID, r.Holder, r.StartedAt.UTC(), r.SeenAt.UTC()}
	if err := s.q(ctx).Create(&row).Error; err != nil {
		return translate(err, "command run")
	}
	return nil
}

// SeeRuns marks every run of holder seen running at t.
func (s Usage) SeeRuns(ctx context.Context, holder string, t time.Time) error {
	if err := s.q(ctx).Exec(`UPDATE command_runs SET seen_at = ? WHERE holder = ?`, t.UTC(), holder).Error; err != nil {
		return dbError("see command runs", err)
	}
	return nil
}

// StaleRuns lists the runs last seen before t, oldest first (at most a
// thousand at a time).
func (s Usage) StaleRuns(ctx context.Context, t time.Time) ([]usage.Run, error) {
	var rows []runRow
	if err := s.q(ctx).Where("seen_at < ?", t.UTC()).Order("seen_at").Limit(1000).Find(&rows).Error; err != nil {
		return nil, dbError("stale command runs", err)
	}
	out := make([]usage.Run, len(rows))
	for i, r := range rows {
		out[i] = usage.Run{ID: r.ID, OrgID: r.OrgID, UserID: r.UserID, ContainerID: r.ContainerID, ThreadID: r.ThreadID,
			Holder: r.Holder, StartedAt: r.StartedAt.UTC(), SeenAt: r.SeenAt.UTC()}
	}
	return out, nil
}

// EndRuns, in one transaction, deletes the records of the ended runs and
// adds the usage of each whose record it deleted (a record another server
// deleted first, settling the run, adds nothing: the run counts once),
// then adds sums.
func (s Usage) EndRuns(ctx context.Context, ended []usage.Ended, sums []usage.Usage) error {
	return s.inTx(ctx, func(tx *handle) error {
		for _, e := range ended {
			res := tx.q(ctx).Exec(`DELETE FROM command_runs WHERE id = ?`, e.RunID)
			if res.Error != nil {
				return dbError("end command run", res.Error)
			}
			if res.RowsAffected == 0 || e.Usage.Commands == 0 {
				continue
			}
			if err := (Usage{tx}).AddUsage(ctx, e.Usage); err != nil {
				return err
			}
		}
		for _, u := range sums {
			if err := (Usage{tx}).AddUsage(ctx, u); err != nil {
				return err
			}
		}
		return nil
	})
}
