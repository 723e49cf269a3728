package store

import (
	"context"
	"time"

	"gorm.io/gorm/clause"

	"threadbox/domain/container"
)

// The records of containers' checkpoints (Containers, for
// infra/checkpoints.Records): which archive of the org's blob store holds each container's saved
// sandbox.

type checkpointRow struct {
	ContainerID string `gorm:"primaryKey"`
	OrgID       string
	Backend     string
	SHA256      string `gorm:"column:sha256"`
	SizeBytes   int64
	TakenAt     time.Time
}

func (checkpointRow) TableName() string { return "container_checkpoints" }

func (r checkpointRow) domain() container.Checkpoint {
	return container.Checkpoint{ContainerID: r.ContainerID, OrgID: r.OrgID, Backend: r.Backend, SHA256: r.SHA256, Bytes: r.SizeBytes, TakenAt: r.TakenAt.UTC()}
}

// SaveCheckpoint records c as its container's checkpoint, in place of the
// one recorded before.
func (s Containers) SaveCheckpoint(ctx context.Context, c container.Checkpoint) error {
	r := checkpointRow{c.ContainerID, c.OrgID, c.Backend, c.SHA256, c.Bytes, c.TakenAt.UTC()}
	err := s.q(ctx).Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "container_id"}}, UpdateAll: true}).Create(&r).Error
	return translate(err, "checkpoint")
}

// ContainerCheckpoint returns the checkpoint recorded for the container
// (fault.NotFound when there is none).
func (s Containers) ContainerCheckpoint(ctx context.Context, containerID string) (container.Checkpoint, error) {
	return take[checkpointRow](s.q(ctx).Where("container_id = ?", containerID), "checkpoint")
}

// DeleteCheckpoint forgets the container's checkpoint if it is still the
// one whose archive is sha256 ("" forgets whichever it is). A missing
// record is not an error.
func (s Containers) DeleteCheckpoint(ctx context.Context, containerID, sha256 string) error {
	q := s.q(ctx).Where("container_id = ?", containerID)
	if sha256 != "" {
		q = q.Where("sha256 = ?", sha256)
	}
	return translate(q.Delete(&checkpointRow{}).Error, "checkpoint")
}

// CheckpointUsers counts the checkpoints of the org whose archive is
// sha256: an archive shared by two records stays until both are gone.
func (s Containers) CheckpointUsers(ctx context.Context, orgID, sha256 string) (int64, error) {
	var n int64
	err := s.q(ctx).Model(&checkpointRow{}).Where("org_id = ? AND sha256 = ?", orgID, sha256).Count(&n).Error
	return n, translate(err, "checkpoints")
}

// StaleCheckpoints lists the checkpoints taken before the cutoff, and
// those whose container is gone or removed.
func (s Containers) StaleCheckpoints(ctx context.Context, takenBefore time.Time) ([]container.Checkpoint, error) {
	return find[checkpointRow](s.q(ctx).Model(&checkpointRow{}).
		Where("taken_at < ? OR NOT EXISTS (SELECT 1 FROM containers c WHERE c.id = container_checkpoints.container_id AND c.state <> ?)", takenBefore.UTC(), string(container.Removed)).
		Order("taken_at"), "checkpoints")
}

// CheckpointBytes sums the archive sizes of the org's checkpoints, which
// count toward its storage quota.
func (s Quota) CheckpointBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Model(&checkpointRow{}).Where("org_id = ?", orgID).Select(sumSizes), "checkpoints")
}
