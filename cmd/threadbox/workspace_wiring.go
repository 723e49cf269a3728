package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"threadbox/app/files"
	"time"

	"threadbox/app/skills"
	"threadbox/app/workspace"
	"threadbox/domain/skill"
	"threadbox/infra/blob"
	"threadbox/infra/checkpoints"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/skillfs"
	"threadbox/infra/store"
)

// skillFiles adapts infra/skillfs to the skills use case's port.
type skillFiles struct{ s *skillfs.Store }

func (f skillFiles) Save(ctx context.Context, orgID, name string, version int, files []skill.File) error {
	return f.s.Save(ctx, orgID, name, version, files)
}

func (f skillFiles) Delete(ctx context.Context, orgID, name string) error {
	return f.s.Delete(ctx, orgID, name)
}

func (f skillFiles) Has(ctx context.Context, orgID, name string, version int) (bool, error) {
	return f.s.Has(ctx, orgID, name, version)
}

// skillArchives keeps skill archives in the artifact store's backend, one
// namespace per org: DATA_DIR/skill-archives/<org>/, or the keys
// skill-archives/<org>/ of BLOB_URL's bucket.
type skillArchives struct {
	store func(orgID string) (archiveStore, error)
}

// archiveStore is what skillArchives needs of a blob store.
type archiveStore interface {
	Put(ctx context.Context, r io.Reader) (string, int64, error)
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
	Remove(ctx context.Context, sha256 string, writtenBefore time.Time) (bool, error)
}

// orgIDShape is what an org id looks like; anything else never names a
// folder or a key.
var orgIDShape = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func newSkillArchives(cfg Config, blobs artifactStore) skillArchives {
	return skillArchives{store: func(orgID string) (archiveStore, error) {
		if !orgIDShape.MatchString(orgID) {
			return nil, fmt.Errorf("skill archives: org id %q", orgID)
		}
		if s3, ok := blobs.(*blob.S3); ok {
			return s3.WithPrefix("skill-archives/" + orgID + "/"), nil
		}
		return blob.New(filepath.Join(cfg.DataDir, "skill-archives", orgID)), nil
	}}
}

// checkpointArchives returns the blob store of an org's checkpoint
// archives: DATA_DIR/checkpoint-archives/<org>/, or the keys
// checkpoint-archives/<org>/ of BLOB_URL's bucket. One namespace per org,
// as for skill archives: an archive is only ever read from the store of
// its container's org.
func checkpointArchives(cfg Config, blobs artifactStore) func(orgID string) (checkpoints.Blobs, error) {
	return func(orgID string) (checkpoints.Blobs, error) {
		if !orgIDShape.MatchString(orgID) {
			return nil, fmt.Errorf("checkpoint archives: org id %q", orgID)
		}
		if s3, ok := blobs.(*blob.S3); ok {
			return s3.WithPrefix("checkpoint-archives/" + orgID + "/"), nil
		}
		return blob.New(filepath.Join(cfg.DataDir, "checkpoint-archives", orgID)), nil
	}
}

// checkpointStore keeps sandboxes' checkpoints in the blob store. With the
// S3 store every checkpoint also mirrors its container's files, in the
// keys checkpoint-files/<org>/<container>/ of BLOB_URL's bucket, so that a
// host without the container's folders restores them with its sandbox.
func checkpointStore(cfg Config, layout *hostdirs.Layout, st *store.Store, blobs artifactStore, log *slog.Logger) *checkpoints.Store {
	cs := checkpoints.New(layout, st.Containers(), checkpointArchives(cfg, blobs), log)
	s3, ok := blobs.(*blob.S3)
	if !ok {
		return cs
	}
	return cs.WithFiles(checkpoints.NewFiles(layout, func(orgID, containerID string) (checkpoints.FileBlobs, error) {
		if !orgIDShape.MatchString(orgID) {
			return nil, fmt.Errorf("checkpoint files: org id %q", orgID)
		}
		return s3.WithPrefix("checkpoint-files/" + orgID + "/" + hostdirs.SafeID(containerID) + "/"), nil
	}))
}

func (a skillArchives) Put(ctx context.Context, orgID string, r io.Reader) (string, error) {
	st, err := a.store(orgID)
	if err != nil {
		return "", err
	}
	sum, _, err := st.Put(ctx, r)
	return sum, err
}

func (a skillArchives) Open(ctx context.Context, orgID, sum string) (io.ReadCloser, error) {
	st, err := a.store(orgID)
	if err != nil {
		return nil, err
	}
	return st.Open(ctx, sum)
}

func (a skillArchives) Remove(ctx context.Context, orgID, sum string) error {
	st, err := a.store(orgID)
	if err != nil {
		return err
	}
	_, err = st.Remove(ctx, sum, time.Time{})
	return err
}

func (f skillFiles) Sync(ctx context.Context, containerID string, loads []skills.Load) error {
	return f.s.Sync(ctx, containerID, skillLoads(loads))
}

func skillLoads(loads []skills.Load) []skillfs.Load {
	out := make([]skillfs.Load, len(loads))
	for i, l := range loads {
		out[i] = skillfs.Load{OrgID: l.OrgID, Name: l.Name, Version: l.Version}
	}
	return out
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

// retainedBlobs is where output files outlive their containers: beside
// the artifacts, DATA_DIR/retained-files or the bucket's retained-files/
// prefix, apart from the artifact blobs so that the artifacts' collector
// never sees them.
func retainedBlobs(cfg Config, blobs artifactStore) files.Blobs {
	if s3, ok := blobs.(*blob.S3); ok {
		return s3.WithPrefix("retained-files/")
	}
	return blob.New(filepath.Join(cfg.DataDir, "retained-files"))
}

// presignExpiry is how long a presigned artifact download URL is valid
// (BLOB_PRESIGN=true), or zero: downloads stream through the server.
func presignExpiry(cfg Config) time.Duration {
	if !cfg.BlobPresign {
		return 0
	}
	return 5 * time.Minute
}

// newWorkspace wires the Workspace API (docs/api.md): the chat's thread
// work over the turns service that prepares every turn and keeps the
// detached turns' logs, thread files over the Files API use cases, the
// artifact store under DATA_DIR. A model upstream writes threads' titles;
// the offline runner, which only runs code, leaves the first line.
func newWorkspace(cfg Config, sys *system, fs containerFiles, snaps workspace.Snapshots, log *slog.Logger) *workspace.Service {
	var titles workspace.Titles
	if cfg.ModelProvider == "anthropic" || cfg.ModelProvider == "openai" {
		titles = sys.turns
	}
	return workspace.New(sys.store.Threads(), sys.store.Artifacts(), workspace.Deps{
		Titles:           titles,
		Turns:            sys.turns,
		Containers:       sys.containers,
		Files:            sys.files,
		Container:        fs,
		Blobs:            sys.blobs,
		BlobLock:         sys.store.Locks(),
		PresignExpiry:    presignExpiry(cfg),
		Policies:         sys.admin,
		MaxArtifactBytes: cfg.MaxArtifactBytes,
		Leases:           sys.leases,
		Quota:            sys.quota,
		Snapshots:        snaps,
		Audit:            sys.store.Accounts(),
		Terminals:        sys.terminals,
		Log:              log.With("component", "workspace"),
	})
}
