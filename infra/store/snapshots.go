package store

import (
	"context"
	"time"

	"threadbox/domain/snapshot"
)

// The records of threads' files snapshots (app/workspace): which turn each
// ended, how many files and bytes it holds and what it stores on its own.

type snapshotRow struct {
	ID         string `gorm:"primaryKey"`
	OrgID      string
	ThreadID   string
	MessageID  string
	Kind       string
	CallID     string
	BaseID     string
	Files      int
	FilesBytes int64
	SizeBytes  int64
	TakenAt    time.Time
}

func (snapshotRow) TableName() string { return "thread_snapshots" }

func (r snapshotRow) domain() snapshot.Snapshot {
	return snapshot.Snapshot{ID: r.ID, OrgID: r.OrgID, ThreadID: r.ThreadID, MessageID: r.MessageID, Kind: r.Kind, CallID: r.CallID, BaseID: r.BaseID, Files: r.Files, Size: r.FilesBytes, Bytes: r.SizeBytes, TakenAt: r.TakenAt.UTC()}
}

// SaveSnapshot records a snapshot, or saves what it stores on its own when
// it is recorded already.
func (s Snapshots) SaveSnapshot(ctx context.Context, sn snapshot.Snapshot) error {
	if sn.Kind == "" {
		sn.Kind = snapshot.KindTurn
	}
	r := snapshotRow{sn.ID, sn.OrgID, sn.ThreadID, sn.MessageID, sn.Kind, sn.CallID, sn.BaseID, sn.Files, sn.Size, sn.Bytes, sn.TakenAt.UTC()}
	if n := s.q(ctx).Model(&snapshotRow{}).Where("id = ?", sn.ID).Update("size_bytes", sn.Bytes); n.Error != nil || n.RowsAffected > 0 {
		return translate(n.Error, "snapshot")
	}
	return translate(s.q(ctx).Create(&r).Error, "snapshot")
}

// ThreadSnapshots lists a thread's snapshots, oldest first.
func (s Snapshots) ThreadSnapshots(ctx context.Context, threadID string) ([]snapshot.Snapshot, error) {
	return find[snapshotRow](s.q(ctx).Where("thread_id = ?", threadID).Order("taken_at, id"), "snapshots")
}

// MessageSnapshot returns the newest snapshot taken when the turn that
// answered with messageID ended (fault.NotFound when none is kept).
func (s Snapshots) MessageSnapshot(ctx context.Context, threadID, messageID string) (snapshot.Snapshot, error) {
	return take[snapshotRow](s.q(ctx).Where("thread_id = ? AND message_id = ? AND kind = ?", threadID, messageID, snapshot.KindTurn).Order("taken_at DESC, id DESC").Limit(1), "snapshot")
}

// DeleteSnapshot forgets a snapshot; a missing one is not an error.
func (s Snapshots) DeleteSnapshot(ctx context.Context, id string) error {
	return translate(s.q(ctx).Where("id = ?", id).Delete(&snapshotRow{}).Error, "snapshot")
}

// SnapshotBytes sums what the org's snapshots store, which counts toward
// its storage quota.
func (s Quota) SnapshotBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Model(&snapshotRow{}).Where("org_id = ?", orgID).Select(sumSizes), "snapshots")
}

// ThreadsExist tells which of ids name a thread that exists.
func (s Snapshots) ThreadsExist(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		var found []string
		if err := s.q(ctx).Table("threads").Where("id IN ?", ids[:n]).Pluck("id", &found).Error; err != nil {
			return nil, translate(err, "threads")
		}
		for _, id := range found {
			out[id] = true
		}
		ids = ids[n:]
	}
	return out, nil
}
