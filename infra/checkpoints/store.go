// Package checkpoints keeps the checkpoints of containers' sandboxes in the
// blob store, so that any server of the deployment can restore them.
//
// A backend writes a checkpoint into a folder on the host (the container's
// checkpoint folder, infra/sandbox/hostdirs). Sealing it packs the folder
// into a zstd-compressed tar archive, puts the archive into the blob store
// of the container's org (DATA_DIR/checkpoint-archives/<org>/, or the keys
// checkpoint-archives/<org>/ of BLOB_URL's bucket) and records it in the
// database (container.Checkpoint): the record is what says a container has
// a checkpoint, and its size counts toward the org's storage quota. The
// folder stays as this host's copy, marked with the archive's SHA-256; a
// restore uses it when it is the recorded one and otherwise unpacks the
// archive into it first. The archive is always read from the blob store of
// the container's own org: a record naming another org's archive finds
// nothing there.
package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
)

// markerFile, in a checkpoint folder, names the archive the folder holds.
const markerFile = "threadbox-archive.sha256"

// Folders keeps each container's checkpoint folder on this host
// (infra/sandbox/hostdirs.Layout).
type Folders interface {
	CheckpointDir(id string) string
	EmptyCheckpoint(ctx context.Context, id string) (string, error)
	SealCheckpoint(ctx context.Context, id, backend string) error
	Checkpoint(ctx context.Context, id string) (dir, backend string, ok bool)
	DropCheckpoint(ctx context.Context, id string) error
}

// Records keeps the checkpoint records (infra/store.Store).
type Records interface {
	Container(ctx context.Context, id string) (container.Container, error)
	SaveCheckpoint(ctx context.Context, c container.Checkpoint) error
	ContainerCheckpoint(ctx context.Context, containerID string) (container.Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, containerID, sha256 string) error
	CheckpointUsers(ctx context.Context, orgID, sha256 string) (int64, error)
	StaleCheckpoints(ctx context.Context, takenBefore time.Time) ([]container.Checkpoint, error)
}

// Blobs is one org's part of the blob store (infra/blob).
type Blobs interface {
	Put(ctx context.Context, r io.Reader) (string, int64, error)
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
	Remove(ctx context.Context, sha256 string, writtenBefore time.Time) (bool, error)
}

// Store keeps containers' checkpoints: folders on this host, archives in
// the blob store, records in the database. It implements the container
// manager's Checkpoints port (app/containers).
type Store struct {
	folders Folders
	records Records
	blobs   func(orgID string) (Blobs, error)
	files   *Files // nil: the files stay on their host
	now     func() time.Time
	log     *slog.Logger
}

// WithFiles makes every checkpoint carry a mirror of its container's files
// (Files), applied by a host that restores it without its own copy; it
// returns s.
func (s *Store) WithFiles(f *Files) *Store {
	s.files = f
	return s
}

// New returns the store; blobs returns the blob store of an org.
func New(folders Folders, records Records, blobs func(orgID string) (Blobs, error), log *slog.Logger) *Store {
	return &Store{folders: folders, records: records, blobs: blobs, now: time.Now, log: log}
}

// EmptyCheckpoint makes the container's checkpoint folder exist and be
// empty, for a backend to write a checkpoint into.
func (s *Store) EmptyCheckpoint(ctx context.Context, id string) (string, error) {
	return s.folders.EmptyCheckpoint(ctx, id)
}

// SealCheckpoint archives the checkpoint the backend wrote into the
// container's folder, puts the archive into the blob store of the
// container's org and records it as the container's checkpoint, in place
// of any earlier one; the folder stays as this host's copy.
func (s *Store) SealCheckpoint(ctx context.Context, id, backend string) error {
	c, err := s.records.Container(ctx, id)
	if err != nil {
		return fmt.Errorf("checkpoints: container: %w", err)
	}
	blobs, err := s.blobs(c.OrgID())
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	dir := s.folders.CheckpointDir(id)
	var files Pending
	if s.files != nil {
		start := s.now()
		if files, err = s.files.Mirror(ctx, c.OrgID(), id, dir); err != nil {
			return err
		}
		s.log.Info("container files mirrored", "container", id, "sent", files.Sent, "took", s.now().Sub(start).String())
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(Pack(ctx, dir, pw, Zstd)) }()
	sum, n, err := blobs.Put(ctx, pr)
	_ = pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("checkpoints: store the archive: %w", err)
	}
	prev, perr := s.records.ContainerCheckpoint(ctx, id)
	rec := container.Checkpoint{ContainerID: id, OrgID: c.OrgID(), Backend: backend, SHA256: sum, Bytes: n, TakenAt: s.now().UTC()}
	if err := s.records.SaveCheckpoint(ctx, rec); err != nil {
		s.removeArchive(context.WithoutCancel(ctx), rec)
		return fmt.Errorf("checkpoints: record: %w", err)
	}
	if perr == nil && prev.SHA256 != sum {
		s.removeArchive(context.WithoutCancel(ctx), prev)
	}
	if err := files.Commit(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("container files mirror not committed", "container", id, "cause", err.Error())
	}
	if err := writeMarker(dir, sum); err != nil {
		return err
	}
	return s.folders.SealCheckpoint(ctx, id, backend)
}

// Checkpoint returns the folder of the container's recorded checkpoint
// and the backend that took it, unpacking its archive from the blob store
// of the container's org first when this host has no copy of it. ok is
// false when the container has none; err says why one it has cannot be
// used (the caller drops it).
func (s *Store) Checkpoint(ctx context.Context, id string) (dir, backend string, ok bool, err error) {
	rec, err := s.records.ContainerCheckpoint(ctx, id)
	if fault.Is(err, fault.NotFound) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("checkpoints: record: %w", err)
	}
	if d, b, sealed := s.folders.Checkpoint(ctx, id); sealed && b == rec.Backend && readMarker(d) == rec.SHA256 {
		return d, b, true, nil
	}
	c, err := s.records.Container(ctx, id)
	if err != nil {
		return "", "", true, fmt.Errorf("checkpoints: container: %w", err)
	}
	blobs, err := s.blobs(c.OrgID())
	if err != nil {
		return "", "", true, fmt.Errorf("checkpoints: %w", err)
	}
	// Always the container's own org's archives, whatever the record says.
	r, err := blobs.Open(ctx, rec.SHA256)
	if err != nil {
		return "", "", true, fmt.Errorf("checkpoints: its archive is not in the store: %w", err)
	}
	defer r.Close()
	dir, err = s.folders.EmptyCheckpoint(ctx, id)
	if err != nil {
		return "", "", true, err
	}
	start := s.now()
	if err := Unpack(ctx, r, dir); err != nil {
		return "", "", true, err
	}
	fetched := 0
	if s.files != nil {
		// This host's files of the container are not the checkpoint's:
		// they become the mirror's before the sandbox sees them.
		if fetched, err = s.files.Apply(ctx, c.OrgID(), id, dir); err != nil {
			return "", "", true, err
		}
	}
	if err := writeMarker(dir, rec.SHA256); err != nil {
		return "", "", true, err
	}
	if err := s.folders.SealCheckpoint(ctx, id, rec.Backend); err != nil {
		return "", "", true, err
	}
	s.log.Info("checkpoint fetched from the blob store", "container", id, "bytes", rec.Bytes, "files_fetched", fetched, "took", s.now().Sub(start).String())
	return dir, rec.Backend, true, nil
}

// DropCheckpoint removes the container's checkpoint: its record, its
// archive (unless another record of the org names the same one) and this
// host's folder.
func (s *Store) DropCheckpoint(ctx context.Context, id string) error {
	var errs []error
	rec, err := s.records.ContainerCheckpoint(ctx, id)
	switch {
	case err == nil:
		errs = append(errs, s.drop(ctx, rec))
	case !fault.Is(err, fault.NotFound):
		errs = append(errs, fmt.Errorf("checkpoints: record: %w", err))
	}
	errs = append(errs, s.folders.DropCheckpoint(ctx, id))
	return errors.Join(errs...)
}

// DropFiles removes the mirror of the container's files from the blob
// store: the container is being removed.
func (s *Store) DropFiles(ctx context.Context, id string) error {
	if s.files == nil {
		return nil
	}
	c, err := s.records.Container(ctx, id)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoints: container: %w", err)
	}
	return s.files.Forget(ctx, c.OrgID(), id)
}

// drop forgets rec and removes its archive.
func (s *Store) drop(ctx context.Context, rec container.Checkpoint) error {
	if err := s.records.DeleteCheckpoint(ctx, rec.ContainerID, rec.SHA256); err != nil {
		return fmt.Errorf("checkpoints: forget: %w", err)
	}
	s.removeArchive(ctx, rec)
	return nil
}

// removeArchive removes rec's archive when no record of its org names it.
func (s *Store) removeArchive(ctx context.Context, rec container.Checkpoint) {
	if n, err := s.records.CheckpointUsers(ctx, rec.OrgID, rec.SHA256); err != nil || n > 0 {
		return
	}
	blobs, err := s.blobs(rec.OrgID)
	if err == nil {
		_, err = blobs.Remove(ctx, rec.SHA256, time.Time{})
	}
	if err != nil {
		s.log.Warn("checkpoint archive not removed", "container", rec.ContainerID, "sha256", rec.SHA256, "cause", err.Error())
	}
}

// StaleCheckpoints lists the containers whose checkpoint was taken before
// the cutoff or whose container is gone; the sweep drops them.
func (s *Store) StaleCheckpoints(ctx context.Context, takenBefore time.Time) ([]string, error) {
	recs, err := s.records.StaleCheckpoints(ctx, takenBefore)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ContainerID
	}
	return ids, nil
}

func writeMarker(dir, sum string) error {
	tmp := filepath.Join(dir, markerFile+".tmp")
	if err := os.WriteFile(tmp, []byte(sum), 0o600); err != nil {
		return fmt.Errorf("checkpoints: mark the folder: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, markerFile)); err != nil {
		return fmt.Errorf("checkpoints: mark the folder: %w", err)
	}
	return nil
}

func readMarker(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
