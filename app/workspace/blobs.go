package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultBlobGrace is how long an artifact blob that no artifact
// references is kept before CollectArtifactBlobs removes it.
const DefaultBlobGrace = 10 * time.Minute

// blobBatch is how many hashes one question to the store carries.
const blobBatch = 500

// artifactRefs tells which artifact blobs are still referenced.
type artifactRefs interface {
	// ProjectArtifactHashes returns the distinct content hashes of the
	// artifacts of the org's project.
	ProjectArtifactHashes(ctx context.Context, orgID, projectID string) ([]string, error)
	// ReferencedArtifactHashes returns those of sums that an artifact of
	// any org references.
	ReferencedArtifactHashes(ctx context.Context, sums []string) ([]string, error)
}

// unreferenced returns the sums that refs does not hold, each once.
func unreferenced(sums, refs []string) []string {
	held := make(map[string]bool, len(refs)+len(sums))
	for _, r := range refs {
		held[r] = true
	}
	var out []string
	for _, s := range sums {
		if !held[s] {
			held[s] = true
			out = append(out, s)
		}
	}
	return out
}

// releaseBlobs removes those of sums (the hashes of artifacts just deleted)
// that no artifact references any more. It holds the blob gate
// exclusively, which every artifact save (on any server, with
// Deps.BlobLock) holds shared from storing its blob to committing its
// row, so a blob being saved right now with the same content is either
// already referenced or written again after this. Failures are logged only: the
// artifacts are gone already, and CollectArtifactBlobs removes what is
// left once the grace period has passed.
func (s *Service) releaseBlobs(ctx context.Context, sums []string) {
	if s.d.Blobs == nil || len(sums) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	unlock, err := s.blobs.exclusive(ctx, s.d.BlobLock)
	if err != nil {
		s.log.Warn("artifact blobs: left for the collector", "err", err)
		return
	}
	defer unlock()
	for i := 0; i < len(sums); i += blobBatch {
		batch := sums[i:min(i+blobBatch, len(sums))]
		refs, err := s.artifacts.ReferencedArtifactHashes(ctx, batch)
		if err != nil {
			s.log.Warn("artifact blobs: look up references", "err", err)
			return
		}
		for _, sum := range unreferenced(batch, refs) {
			if _, err := s.d.Blobs.Remove(ctx, sum, time.Time{}); err != nil {
				s.log.Warn("artifact blobs: remove", "sha256", sum, "err", err)
			}
		}
	}
}

// CollectArtifactBlobs removes every artifact blob that no artifact
// references and that was last written longer than the grace period ago
// (Deps.BlobGrace, default DefaultBlobGrace), and returns how many it
// removed. The background sweeper calls it periodically; it is safe to
// run at any time and beside artifact saves.
//
// The grace period is what keeps a save that is under way: its blob is
// written (or, when the content is stored already, its write time
// restarted) before its artifact row is committed, so for a moment a blob
// is on disk that nothing references yet. Such a blob is young and is
// spared; the blob store checks the age again at removal, under the lock
// that the write takes. A save whose row takes longer than the grace
// period to commit after its blob was written could lose its blob. Blobs
// left behind by failed saves, by deletions that could not remove them, or
// by a crash are removed here.
func (s *Service) CollectArtifactBlobs(ctx context.Context) (removed int, err error) {
	if s.d.Blobs == nil {
		return 0, nil
	}
	cutoff := s.now().Add(-s.d.BlobGrace)
	var errs []error
	batch := make([]string, 0, blobBatch)
	flush := func() error {
		// Under the gate no save is between writing a blob and
		// committing its row, on this server or another, so a blob
		// unreferenced now is garbage (its age is checked all the same).
		unlock, err := s.blobs.exclusive(ctx, s.d.BlobLock)
		if err != nil {
			return err
		}
		defer unlock()
		refs, err := s.artifacts.ReferencedArtifactHashes(ctx, batch)
		if err != nil {
			return err
		}
		for _, sum := range unreferenced(batch, refs) {
			ok, err := s.d.Blobs.Remove(ctx, sum, cutoff)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				removed++
			}
		}
		batch = batch[:0]
		return nil
	}
	err = s.d.Blobs.Walk(ctx, func(sum string, written time.Time) error {
		if !written.Before(cutoff) {
			return nil
		}
		batch = append(batch, sum)
		if len(batch) < blobBatch {
			return nil
		}
		return flush()
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	if err = errors.Join(append([]error{err}, errs...)...); err != nil {
		return removed, fmt.Errorf("workspace: collect artifact blobs: %w", err)
	}
	return removed, nil
}
