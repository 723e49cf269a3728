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

// Page asks for one page of a project's artifacts, oldest first or, with
// NewestFirst, newest first.
type Page struct {
	// Limit is the most artifacts returned (zero or less: DefaultPage).
	// The API takes 1 to MaxPage and asks one more, to tell whether more
	// follow.
	Limit int
	// After, an artifact id of the project, lists the artifacts that come
	// after it in the page's order.
	After       string
	NewestFirst bool
}

// Page sizes of artifact listings.
const (
	DefaultPage = 20
	MaxPage     = 100
)

// Repository stores artifacts, scoped by org.
type Repository interface {
	CreateArtifact(ctx context.Context, a Artifact) error
	Artifact(ctx context.Context, orgID, id string) (Artifact, error)
	// ArtifactsByProject lists one page of the project's artifacts; an
	// After that names no artifact of the project is invalid.
	ArtifactsByProject(ctx context.Context, orgID, projectID string, p Page) ([]Artifact, error)
	LatestArtifact(ctx context.Context, projectID, threadID, path string) (Artifact, error)
	// ArtifactWithContent returns an artifact of the project at path with
	// that content (sha256), the newest, or a not-found error.
	ArtifactWithContent(ctx context.Context, projectID, path, sha256 string) (Artifact, error)
}
