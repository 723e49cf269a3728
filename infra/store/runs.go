package store

import (
	"context"
	"time"

	"threadbox/app/usage"
)

// Command runs (app/usage.Runs): one row per command while it runs, so
// that the commands of a server that dies are still metered.

var _ usage.Runs = Usage{}

// runRow is a row of command_runs: a run as recorded, its times in UTC.
type runRow struct {
	usage.Run `gorm:"embedded"`
}

func (runRow) TableName() string { return "command_runs" }

func (r runRow) domain() usage.Run {
	r.StartedAt, r.SeenAt = r.StartedAt.UTC(), r.SeenAt.UTC()
	return r.Run
}

// StartRun records a run.
func (s Usage) StartRun(ctx context.Context, r usage.Run) error {
	r.StartedAt, r.SeenAt = r.StartedAt.UTC(), r.SeenAt.UTC()
	row := runRow{r}
	if err := s.q(ctx).Create(&row).Error; err != nil {
		return translate(err, "command run")
	}
	return nil
}

// SeeRuns marks every run of holder seen running at t.
func (s Usage) SeeRuns(ctx context.Context, holder string, t time.Time) error {
	return s.exec(ctx, "see command runs", `UPDATE command_runs SET seen_at = ? WHERE holder = ?`, t.UTC(), holder)
}

// StaleRuns lists the runs last seen before t, oldest first (at most a
// thousand at a time).
func (s Usage) StaleRuns(ctx context.Context, t time.Time) ([]usage.Run, error) {
	return find[runRow](s.q(ctx).Where("seen_at < ?", t.UTC()).Order("seen_at").Limit(1000), "stale command runs")
}

// EndRuns, in one transaction, deletes the records of the ended runs and
// adds the usage of each whose record it deleted (a record another server
// deleted first, settling the run, adds nothing: the run counts once),
// then adds sums (one whose key is recorded already adds nothing).
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
			if err := (Usage{tx}).add(ctx, e.Usage); err != nil {
				return err
			}
		}
		for _, u := range sums {
			if err := (Usage{tx}).add(ctx, u); err != nil {
				return err
			}
		}
		return nil
	})
}
