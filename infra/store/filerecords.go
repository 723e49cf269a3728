package store

import (
	"context"
	"time"

	"gorm.io/gorm/clause"

	"threadbox/app/files"
)

// fileRecordRow is a file's record beside its container (app/files.Record).
type fileRecordRow struct {
	ContainerID string `gorm:"primaryKey"`
	Path        string `gorm:"primaryKey"`
	OrgID       string
	OwnerID     string
	SHA256      string `gorm:"column:sha256"`
	SizeBytes   int64
	CreatedAt   time.Time
	ExpiresAt   *time.Time
}

func (fileRecordRow) TableName() string { return "file_records" }

func (r fileRecordRow) domain() files.Record {
	out := files.Record{ContainerID: r.ContainerID, Path: r.Path, OrgID: r.OrgID, OwnerID: r.OwnerID,
		SHA256: r.SHA256, SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt.UTC()}
	if r.ExpiresAt != nil {
		out.ExpiresAt = r.ExpiresAt.UTC()
	}
	return out
}

// FileRecord returns the record of a container's file.
func (s Files) FileRecord(ctx context.Context, containerID, sandboxPath string) (files.Record, error) {
	return take[fileRecordRow](s.q(ctx).Where("container_id = ? AND path = ?", containerID, sandboxPath), "file record")
}

// FileRecords returns every record of a container.
func (s Files) FileRecords(ctx context.Context, containerID string) ([]files.Record, error) {
	return find[fileRecordRow](s.q(ctx).Where("container_id = ?", containerID).Order("path"), "file records")
}

// PutFileRecord inserts or replaces a record.
func (s Files) PutFileRecord(ctx context.Context, r files.Record) error {
	row := fileRecordRow{ContainerID: r.ContainerID, Path: r.Path, OrgID: r.OrgID, OwnerID: r.OwnerID,
		SHA256: r.SHA256, SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt.UTC()}
	if !r.ExpiresAt.IsZero() {
		t := r.ExpiresAt.UTC()
		row.ExpiresAt = &t
	}
	err := s.q(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "container_id"}, {Name: "path"}},
		DoUpdates: clause.AssignmentColumns([]string{"org_id", "owner_id", "sha256", "size_bytes", "created_at", "expires_at"}),
	}).Create(&row).Error
	return translate(err, "file record")
}

// DeleteFileRecord deletes a record.
func (s Files) DeleteFileRecord(ctx context.Context, containerID, sandboxPath string) error {
	err := s.q(ctx).Where("container_id = ? AND path = ?", containerID, sandboxPath).Delete(&fileRecordRow{}).Error
	return translate(err, "file record")
}

// DeleteFileRecords deletes every record of a container.
func (s Files) DeleteFileRecords(ctx context.Context, containerID string) error {
	err := s.q(ctx).Where("container_id = ?", containerID).Delete(&fileRecordRow{}).Error
	return translate(err, "file records")
}

// ExpiredFileRecords returns up to limit records whose expiry is at or
// before now, the oldest first.
func (s Files) ExpiredFileRecords(ctx context.Context, now time.Time, limit int) ([]files.Record, error) {
	return find[fileRecordRow](s.q(ctx).Where("expires_at IS NOT NULL AND expires_at <= ?", now.UTC()).Order("expires_at").Limit(limit), "expired file records")
}

// FileContentReferenced reports whether a record holds the content.
func (s Files) FileContentReferenced(ctx context.Context, sha256 string) (bool, error) {
	var n int64
	if err := s.q(ctx).Model(&fileRecordRow{}).Where("sha256 = ?", sha256).Count(&n).Error; err != nil {
		return false, dbError("file content references", err)
	}
	return n > 0, nil
}

// RetainedFileBytes sums the sizes of the org's retained output files.
func (s Quota) RetainedFileBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Model(&fileRecordRow{}).Where("org_id = ? AND sha256 <> ''", orgID).Select(sumSizes), "file records")
}

var _ files.Records = Files{}
