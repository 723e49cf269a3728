package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/file/filetype"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// The bounds of an upload's expires_in_seconds, as the Anthropic Files API
// sets them: one hour to ninety days.
const (
	MinExpiry = time.Hour
	MaxExpiry = 90 * 24 * time.Hour
)

// sweepBatch is how many expired files one sweep step deletes.
const sweepBatch = 500

// located is where a file id leads: its container's file and, where the
// database keeps one, the file's record.
type located struct {
	cid  string
	loc  file.Location
	live bool    // the container exists
	rec  *Record // the file's record, or nil
}

// retained reports whether the file is served from its record: its
// container is gone, or holds nothing at the path any more.
func (l located) retained() bool { return l.rec != nil && l.rec.Retained() && !l.live }

// expiresAt is the file's expiry, or zero.
func (l located) expiresAt() time.Time {
	if l.rec == nil {
		return time.Time{}
	}
	return l.rec.ExpiresAt
}

// find locates a file id for p: in its container and in the records. A
// file past its expiry is deleted here and is not found; a container
// removed at its maximum age still leads to its retained outputs.
func (s *Service) find(ctx context.Context, p user.Principal, scopeID, fileID string) (located, error) {
	sandboxPath, err := file.DecodeID(fileID)
	if err != nil {
		return located{}, fault.Errorf(fault.Invalid, "invalid file id %q", fileID)
	}
	loc, err := s.table.Resolve(sandboxPath)
	if err != nil || loc.Mount == file.Skills || loc.Rel == "." {
		return located{}, notFound(fileID)
	}
	at := located{loc: loc, live: true}
	at.cid, err = s.containers.Container(ctx, p, scopeID, false)
	if err != nil {
		at.live = false
		if at.cid, err = s.retainedScope(ctx, p, scopeID, err); err != nil {
			return located{}, err
		}
	}
	if s.records != nil {
		r, err := s.records.FileRecord(ctx, at.cid, loc.Path)
		switch {
		case err == nil && (r.OrgID != p.OrgID || r.OwnerID != p.UserID):
		case err == nil:
			at.rec = &r
		case !fault.Is(err, fault.NotFound):
			return located{}, fmt.Errorf("files: record: %w", err)
		}
	}
	if at.rec != nil && at.rec.Expired(s.now()) {
		if err := s.drop(ctx, *at.rec); err != nil {
			return located{}, err
		}
		return located{}, notFound(fileID)
	}
	if at.live && at.rec != nil && at.rec.Retained() {
		// A file written at the path since takes the retained one's place.
		if _, err := s.store.Stat(ctx, at.cid, loc.Path); errors.Is(err, file.ErrNotFound) {
			at.live = false
		}
	}
	if !at.live && at.rec == nil {
		return located{}, notFound(fileID)
	}
	return at, nil
}

// retainedScope answers a scope whose container is not there (cerr, the
// error that said so): its storage id when that is not found and retained
// outputs may be kept under it, else cerr.
func (s *Service) retainedScope(ctx context.Context, p user.Principal, scopeID string, cerr error) (string, error) {
	if s.records == nil || !fault.Is(cerr, fault.NotFound) {
		return "", cerr
	}
	sid, err := s.containers.StorageID(ctx, p, scopeID)
	if err != nil {
		return "", cerr
	}
	recs, err := s.records.FileRecords(ctx, sid)
	if err != nil {
		return "", fmt.Errorf("files: records: %w", err)
	}
	for _, r := range recs {
		if r.Retained() && r.OrgID == p.OrgID && r.OwnerID == p.UserID {
			return sid, nil
		}
	}
	return "", cerr
}

// containerRecords returns the container's records by sandbox path.
func (s *Service) containerRecords(ctx context.Context, cid string) (map[string]Record, error) {
	out := map[string]Record{}
	if s.records == nil {
		return out, nil
	}
	recs, err := s.records.FileRecords(ctx, cid)
	if err != nil {
		return nil, fmt.Errorf("files: records: %w", err)
	}
	for _, r := range recs {
		out[r.Path] = r
	}
	return out, nil
}

// retainedFile is the file object of a retained output.
func (s *Service) retainedFile(ctx context.Context, scopeID string, r Record) File {
	var head []byte
	if body, err := s.blobs.Open(ctx, r.SHA256); err == nil {
		head = make([]byte, filetype.SniffLen)
		n, _ := io.ReadFull(body, head)
		head = head[:n]
		body.Close()
	}
	return s.recordFile(scopeID, r, head)
}

func (s *Service) recordFile(scopeID string, r Record, head []byte) File {
	loc, _ := s.table.Resolve(r.Path)
	key, _ := file.KeyOf(loc.Mount, loc.Rel)
	name := path.Base(r.Path)
	t := filetype.Detect(name, head)
	return File{
		ID:           file.EncodeID(r.Path),
		Path:         r.Path,
		Key:          key,
		CreatedAt:    r.CreatedAt.UTC(),
		Filename:     name,
		MIMEType:     t.MIME,
		SizeBytes:    r.SizeBytes,
		Downloadable: loc.Mount != file.Uploads,
		ETag:         r.SHA256[:32],
		ScopeID:      scopeID,
		Inline:       t.Inline,
		ExpiresAt:    r.ExpiresAt,
	}
}

// openRetained opens a retained output's content, under the policy for
// generated files.
func (s *Service) openRetained(ctx context.Context, p user.Principal, scopeID string, r Record) (Content, error) {
	policy, err := s.policies.OrgPolicy(ctx, p.OrgID)
	if err != nil {
		return Content{}, fmt.Errorf("files: policy: %w", err)
	}
	if !policy.Allows(org.DownloadsGenerated) {
		return Content{}, org.Refusal(org.DownloadsGenerated)
	}
	body, err := s.blobs.Open(ctx, r.SHA256)
	if err != nil {
		return Content{}, fault.Wrap(fault.Internal, "file storage error", err)
	}
	head := make([]byte, filetype.SniffLen)
	n, err := io.ReadFull(body, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		body.Close()
		return Content{}, fmt.Errorf("files: read retained %s: %w", r.Path, err)
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		body.Close()
		return Content{}, fmt.Errorf("files: rewind retained %s: %w", r.Path, err)
	}
	return Content{File: s.recordFile(scopeID, r, head[:n]), Body: body, Source: "blob:" + r.SHA256}, nil
}

// checkExpiry checks an upload's expires_in_seconds.
func (s *Service) checkExpiry(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case s.records == nil:
		return fault.New(fault.Invalid, "expires_in_seconds is not supported by this server")
	case d < MinExpiry || d > MaxExpiry:
		return fault.Errorf(fault.Invalid, "expires_in_seconds must be between %d and %d", int(MinExpiry.Seconds()), int(MaxExpiry.Seconds()))
	}
	return nil
}

// noteWrite records what a write changed: the file has the expiry
// expiresIn gives it (none when zero), and no retained content stays
// behind it. It returns the expiry.
func (s *Service) noteWrite(ctx context.Context, p user.Principal, cid, sandboxPath string, created time.Time, expiresIn time.Duration) (time.Time, error) {
	if s.records == nil {
		return time.Time{}, nil
	}
	old, err := s.records.FileRecord(ctx, cid, sandboxPath)
	if err != nil && !fault.Is(err, fault.NotFound) {
		return time.Time{}, fmt.Errorf("files: record: %w", err)
	}
	if err == nil {
		if err := s.forget(ctx, old); err != nil {
			return time.Time{}, err
		}
	}
	if expiresIn == 0 {
		return time.Time{}, nil
	}
	at := s.now().Add(expiresIn).UTC().Truncate(time.Second)
	r := Record{ContainerID: cid, Path: sandboxPath, OrgID: p.OrgID, OwnerID: p.UserID, CreatedAt: created.UTC(), ExpiresAt: at}
	if err := s.records.PutFileRecord(ctx, r); err != nil {
		return time.Time{}, fmt.Errorf("files: record: %w", err)
	}
	return at, nil
}

// Expire sets when a file of the container expires, counted from now
// (an upload's expires_in_seconds sent after its file), and returns the
// file object.
func (s *Service) Expire(ctx context.Context, p user.Principal, scopeID, fileID string, expiresIn time.Duration) (File, error) {
	if err := s.checkExpiry(expiresIn); err != nil {
		return File{}, err
	}
	at, err := s.find(ctx, p, scopeID, fileID)
	if err != nil {
		return File{}, err
	}
	if !at.live {
		return File{}, notFound(fileID)
	}
	info, err := s.store.Stat(ctx, at.cid, at.loc.Path)
	if err != nil {
		return File{}, readErr(err, fileID)
	}
	exp, err := s.noteWrite(ctx, p, at.cid, at.loc.Path, info.Created, expiresIn)
	if err != nil {
		return File{}, err
	}
	f := s.fileOf(scopeID, at.loc.Mount, info, s.sniff(ctx, at.cid, at.loc.Path))
	f.ExpiresAt = exp
	return f, nil
}

// Retain keeps the output files of a container about to be removed at
// its maximum age: each one's content goes to the blob store under a
// record, so it stays downloadable by its file id (with the container's
// scope id) until it is deleted or expires. The container's removal waits
// for it: an error leaves the container for the next sweep.
//
// A retained output is stored whole, its holes written out: a sparse
// output (`truncate -s 1T` in the sandbox, at no cost to its disk) would
// cost the blob store its size. So, quota or not, an output larger than
// the server's cap (Deps.MaxRetainedBytes) is not retained, and one with
// holes only when its holes fit the room left for holes: the cap, less
// the holes of the outputs retained before it, and no more than the org
// may still store under its storage quota (its data already counts
// toward it). An output left out goes with its container, and its sandbox
// path is returned in skipped for the caller to log.
func (s *Service) Retain(ctx context.Context, containerID, orgID, ownerID string) (skipped []string, err error) {
	if s.records == nil || s.blobs == nil {
		return nil, nil
	}
	root, _ := s.table.Path(file.Outputs, ".")
	infos, err := s.store.Walk(ctx, containerID, root)
	if errors.Is(err, file.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("files: retain %s: %w", containerID, err)
	}
	room := int64(-1) // what holes may still take, measured at the first hole
	for _, info := range infos {
		sp, _ := s.table.Path(file.Outputs, info.Rel)
		old, err := s.records.FileRecord(ctx, containerID, sp)
		switch {
		case err == nil && old.Expired(s.now()):
			continue
		case err != nil && !fault.Is(err, fault.NotFound):
			return skipped, fmt.Errorf("files: retain %s: %w", sp, err)
		}
		if info.Size > s.maxRetain {
			skipped = append(skipped, sp)
			continue
		}
		if info.Holes > 0 {
			if room < 0 {
				if room, err = s.holeRoom(ctx, orgID); err != nil {
					return skipped, fmt.Errorf("files: retain %s: %w", sp, err)
				}
			}
			if info.Holes > room {
				skipped = append(skipped, sp)
				continue
			}
			room -= info.Holes
		}
		kept, err := s.retain(ctx, containerID, sp, Record{ContainerID: containerID, Path: sp, OrgID: orgID, OwnerID: ownerID, CreatedAt: info.Created.UTC(), ExpiresAt: old.ExpiresAt})
		if err != nil {
			return skipped, fmt.Errorf("files: retain %s: %w", sp, err)
		}
		if !kept {
			skipped = append(skipped, sp)
		}
	}
	return skipped, nil
}

// retain copies the output at sp into the blob store and records r for
// it. An output gone, no longer a regular file, or grown past the cap
// since it was listed (the sandbox still runs) is not kept; one grown is
// reported so (false), and its partial copy removed.
func (s *Service) retain(ctx context.Context, containerID, sp string, r Record) (kept bool, err error) {
	body, _, err := s.store.Open(ctx, containerID, sp)
	if err != nil {
		if errors.Is(err, file.ErrNotFound) || errors.Is(err, file.ErrSymlink) || errors.Is(err, file.ErrNotRegular) {
			return true, nil
		}
		return false, err
	}
	sum, n, err := s.blobs.Put(ctx, io.LimitReader(body, s.maxRetain+1))
	body.Close()
	if err != nil {
		return false, err
	}
	if n > s.maxRetain {
		held, err := s.records.FileContentReferenced(ctx, sum)
		if err == nil && !held {
			_, err = s.blobs.Remove(ctx, sum, time.Now())
		}
		return false, err
	}
	r.SHA256, r.SizeBytes = sum, n
	return true, s.records.PutFileRecord(ctx, r)
}

// holeRoom returns what the holes of a container's outputs may take
// together: the server's cap, or what the org may still store under its
// storage quota when that is less (0 when the quota is reached).
func (s *Service) holeRoom(ctx context.Context, orgID string) (int64, error) {
	if s.quota == nil {
		return s.maxRetain, nil
	}
	left, err := s.quota.StorageLeft(ctx, orgID)
	if fault.Is(err, fault.TooLarge) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if left < 0 {
		return s.maxRetain, nil
	}
	return min(left, s.maxRetain), nil
}

// Forget deletes the records (and retained contents) of a container
// deleted for good.
func (s *Service) Forget(ctx context.Context, containerID string) error {
	if s.records == nil {
		return nil
	}
	recs, err := s.records.FileRecords(ctx, containerID)
	if err != nil {
		return fmt.Errorf("files: records: %w", err)
	}
	for _, r := range recs {
		if err := s.forget(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// SweepExpired deletes every file past its expiry, in its container and
// retained, and returns how many.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	if s.records == nil {
		return 0, nil
	}
	n := 0
	for {
		recs, err := s.records.ExpiredFileRecords(ctx, s.now(), sweepBatch)
		if err != nil {
			return n, fmt.Errorf("files: expired records: %w", err)
		}
		for _, r := range recs {
			if err := s.drop(ctx, r); err != nil {
				return n, err
			}
			n++
		}
		if len(recs) < sweepBatch {
			return n, nil
		}
	}
}

// drop deletes an expired file: in its container (if it is there) and
// its record.
func (s *Service) drop(ctx context.Context, r Record) error {
	if !r.Retained() {
		err := s.store.Remove(ctx, r.ContainerID, r.Path)
		if err != nil && !errors.Is(err, file.ErrNotFound) && !errors.As(err, new(*file.MountError)) {
			return fmt.Errorf("files: remove expired %s: %w", r.Path, err)
		}
	}
	return s.forget(ctx, r)
}

// forget deletes a record and its retained content when no other record
// holds the same content. A blob written again since the check began
// (the same content retained meanwhile) is kept.
func (s *Service) forget(ctx context.Context, r Record) error {
	began := time.Now()
	if err := s.records.DeleteFileRecord(ctx, r.ContainerID, r.Path); err != nil {
		return fmt.Errorf("files: delete record: %w", err)
	}
	if !r.Retained() || s.blobs == nil {
		return nil
	}
	held, err := s.records.FileContentReferenced(ctx, r.SHA256)
	if err != nil || held {
		return err
	}
	if _, err := s.blobs.Remove(ctx, r.SHA256, began); err != nil {
		return fmt.Errorf("files: remove retained content: %w", err)
	}
	return nil
}
