package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"threadbox/app/skills"
	"threadbox/app/workspace"
	"threadbox/domain/skill"
	"threadbox/infra/blob"
	"threadbox/infra/fsroot"
	"threadbox/infra/skillfs"
)

// skillFiles adapts infra/skillfs to the skills use case's port.
type skillFiles struct{ s *skillfs.Store }

func (f skillFiles) Save(ctx context.Context, orgID, name string, version int, files []skill.File) error {
	return f.s.Save(ctx, orgID, name, version, files)
}

func (f skillFiles) Delete(ctx context.Context, orgID, name string) error {
	return f.s.Delete(ctx, orgID, name)
}

func (f skillFiles) Sync(ctx context.Context, containerID string, loads []skills.Load) error {
	out := make([]skillfs.Load, len(loads))
	for i, l := range loads {
		out[i] = skillfs.Load{OrgID: l.OrgID, Name: l.Name, Version: l.Version}
	}
	return f.s.Sync(ctx, containerID, out)
}

// artifactStore is where artifact blobs are kept (infra/blob: Store or S3).
type artifactStore interface {
	workspace.Blobs
	// Ready reports whether the store answers (GET /readyz).
	Ready(ctx context.Context) error
}

// newBlobs opens the artifact store: DATA_DIR/artifacts, or the
// S3-compatible bucket of BLOB_URL, whose credentials come from
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) or the
// AWS shared credentials file. The bucket must exist; BLOB_CREATE_BUCKET=true
// makes it (development and tests).
func newBlobs(ctx context.Context, cfg Config) (artifactStore, error) {
	if cfg.BlobURL == "" {
		return blob.New(filepath.Join(cfg.DataDir, "artifacts")), nil
	}
	o, err := blob.ParseS3URL(cfg.BlobURL)
	if err != nil {
		return nil, err
	}
	o.Create = cfg.BlobCreateBucket
	return blob.NewS3(ctx, o)
}

// presignExpiry is how long a presigned artifact download URL is valid
// (BLOB_PRESIGN=true), or zero: downloads stream through the server.
func presignExpiry(cfg Config) time.Duration {
	if !cfg.BlobPresign {
		return 0
	}
	return 5 * time.Minute
}

// newWorkspace wires the Workspace API (CONTRACT §7): the chat pipeline
// over the front door every turn goes through, thread files over the Files
// API use cases, the artifact store under DATA_DIR.
func newWorkspace(cfg Config, sys *system, fs *fsroot.Containers, log *slog.Logger) *workspace.Service {
	return workspace.New(sys.store, workspace.Deps{
		Turns:            sys.turns,
		Containers:       sys.containers,
		Files:            sys.files,
		Container:        fs,
		Blobs:            sys.blobs,
		BlobLock:         sys.store,
		PresignExpiry:    presignExpiry(cfg),
		Skills:           sys.skills,
		Policies:         sys.admin,
		MaxArtifactBytes: cfg.MaxArtifactBytes,
		Leases:           sys.leases,
		Quota:            sys.quota,
		Audit:            sys.store,
		Log:              log.With("component", "workspace"),
	})
}
