// Package artifact holds artifacts: copies of generated output files saved
// into a thread's project, kept after the thread's sandbox is gone.
package artifact

import (
	"context"
	"time"
)

// Artifact is one version of a generated file.
type Artifact struct {
	ID        string
	OrgID     string
	ProjectID string
	ThreadID  string
	// CreatedBy is the user whose thread made the artifact (the thread's
	// owner), kept after the thread is deleted.
	CreatedBy string
	// CreatorEmail is CreatedBy's email, filled when artifacts are read
	// for display ("" when unknown); never stored.
	CreatorEmail string
	ToolUseID    string
	Path         string // sandbox path it was produced at
	Name         string
	MimeType     string
	SizeBytes    int64
	SHA256       string
	Version      int
	CreatedAt    time.Time
}

// Repository stores artifacts, scoped by org.
type Repository interface {
	CreateArtifact(ctx context.Context, a Artifact) error
	Artifact(ctx context.Context, orgID, id string) (Artifact, error)
	ArtifactsByProject(ctx context.Context, orgID, projectID string) ([]Artifact, error)
	LatestArtifact(ctx context.Context, projectID, threadID, path string) (Artifact, error)
	// ArtifactWithContent returns an artifact of the project at path with
	// that content (sha256), the newest, or a not-found error.
	ArtifactWithContent(ctx context.Context, projectID, path, sha256 string) (Artifact, error)
}
