package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"gorm.io/gorm"

	"threadbox/domain/artifact"
	"threadbox/domain/fault"
)

type artifactRow struct {
	ID        string `gorm:"primaryKey"`
	OrgID     string
	ProjectID string
	ThreadID  string
	CreatedBy string
	ToolUseID string
	Path      string
	Name      string
	MimeType  string
	SizeBytes int64
	SHA256    string `gorm:"column:sha256"`
	Version   int
	CreatedAt time.Time
	// CreatorEmail is read from the users table (artifactsWithCreator),
	// never written.
	CreatorEmail string `gorm:"->;-:migration"`
}

func (artifactRow) TableName() string { return "artifacts" }

// artifactsWithCreator selects artifacts with their creator's email.
func (s Artifacts) artifactsWithCreator(ctx context.Context) *gorm.DB {
	return s.q(ctx).Model(&artifactRow{}).Select("artifacts.*, COALESCE(users.email, '') AS creator_email").
		Joins("LEFT JOIN users ON users.id = artifacts.created_by")
}

func (r artifactRow) domain() artifact.Artifact {
	return artifact.Artifact{
		ID: r.ID, OrgID: r.OrgID, ProjectID: r.ProjectID, ThreadID: r.ThreadID, CreatedBy: r.CreatedBy, CreatorEmail: r.CreatorEmail, ToolUseID: r.ToolUseID,
		Path: r.Path, Name: r.Name, MimeType: r.MimeType, SizeBytes: r.SizeBytes, SHA256: r.SHA256,
		Version: r.Version, CreatedAt: r.CreatedAt.UTC(),
	}
}

// CreateArtifact stores a new artifact version; a second artifact with the
// same project, thread, path and version is a conflict.
func (s Artifacts) CreateArtifact(ctx context.Context, a artifact.Artifact) error {
	r := artifactRow{ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, ThreadID: a.ThreadID, CreatedBy: a.CreatedBy, ToolUseID: a.ToolUseID,
		Path: a.Path, Name: a.Name, MimeType: a.MimeType, SizeBytes: a.SizeBytes, SHA256: a.SHA256, Version: a.Version, CreatedAt: a.CreatedAt.UTC()}
	return translate(s.q(ctx).Create(&r).Error, "artifact")
}

// Artifact returns the org's artifact with id.
func (s Artifacts) Artifact(ctx context.Context, orgID, id string) (artifact.Artifact, error) {
	return take[artifactRow](s.artifactsWithCreator(ctx).Where("artifacts.id = ? AND artifacts.org_id = ?", id, orgID), "artifact")
}

// ArtifactsByProject lists one page of the artifacts of the org's project,
// by creation time, then id: oldest first, or newest first with
// p.NewestFirst. An After that is no artifact of the project is invalid.
func (s Artifacts) ArtifactsByProject(ctx context.Context, orgID, projectID string, p artifact.Page) ([]artifact.Artifact, error) {
	q := s.artifactsWithCreator(ctx).Where("artifacts.org_id = ? AND artifacts.project_id = ?", orgID, projectID)
	if p.After != "" {
		var cur artifactRow
		err := s.q(ctx).Where("id = ? AND org_id = ? AND project_id = ?", p.After, orgID, projectID).Take(&cur).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, fault.Errorf(fault.Invalid, "after: %q is not an artifact of this project", p.After)
		}
		if err != nil {
			return nil, translate(err, "artifact")
		}
		cmp := ">"
		if p.NewestFirst {
			cmp = "<"
		}
		q = q.Where("artifacts.created_at "+cmp+" ? OR (artifacts.created_at = ? AND artifacts.id "+cmp+" ?)", cur.CreatedAt, cur.CreatedAt, cur.ID)
	}
	order := "artifacts.created_at, artifacts.id"
	if p.NewestFirst {
		order = "artifacts.created_at DESC, artifacts.id DESC"
	}
	limit := p.Limit
	if limit <= 0 {
		limit = artifact.DefaultPage
	}
	return find[artifactRow](q.Order(order).Limit(limit), "artifacts")
}

// LatestArtifact returns the highest version saved for a thread's path.
func (s Artifacts) LatestArtifact(ctx context.Context, projectID, threadID, path string) (artifact.Artifact, error) {
	return take[artifactRow](s.q(ctx).Where("project_id = ? AND thread_id = ? AND path = ?", projectID, threadID, path).
		Order("version DESC"), "artifact")
}

// ArtifactWithContent returns the project's newest artifact at path with
// that content.
func (s Artifacts) ArtifactWithContent(ctx context.Context, projectID, path, sha256 string) (artifact.Artifact, error) {
	return take[artifactRow](s.q(ctx).Where("project_id = ? AND path = ? AND sha256 = ?", projectID, path, sha256).
		Order("created_at DESC"), "artifact")
}

// ProjectArtifactHashes returns the distinct content hashes of the
// artifacts of the org's project.
func (s Artifacts) ProjectArtifactHashes(ctx context.Context, orgID, projectID string) ([]string, error) {
	var sums []string
	if err := s.q(ctx).Model(&artifactRow{}).Where("org_id = ? AND project_id = ?", orgID, projectID).
		Distinct("sha256").Order("sha256").Pluck("sha256", &sums).Error; err != nil {
		return nil, dbError("project artifact hashes", err)
	}
	return sums, nil
}

// hashBatch bounds the bound parameters of one IN list (SQLite allows
// 32766, older builds 999).
const hashBatch = 500

// ReferencedArtifactHashes returns those of sums that at least one
// artifact, of any org, references; in no particular order.
func (s Artifacts) ReferencedArtifactHashes(ctx context.Context, sums []string) ([]string, error) {
	var out []string
	for batch := range slices.Chunk(sums, hashBatch) {
		var found []string
		if err := s.q(ctx).Model(&artifactRow{}).Where("sha256 IN ?", batch).
			Distinct("sha256").Pluck("sha256", &found).Error; err != nil {
			return nil, dbError("referenced artifact hashes", err)
		}
		out = append(out, found...)
	}
	return out, nil
}
