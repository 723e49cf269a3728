package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"threadbox/app/files"
	"threadbox/app/messages/wire"
	"threadbox/domain/artifact"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/file/filetype"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/sandbox"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// stamp is what changes when an output file is rewritten: the status
// change time too, which code cannot set back as it can the modification
// time.
type stamp struct {
	size    int64
	mod     time.Time
	changed time.Time
	inode   uint64
}

func stampOf(i file.Info) stamp { return stamp{i.Size, i.Modified, i.Changed, i.Inode} }

// ArtifactURL returns the download URL of an artifact's content.
func ArtifactURL(artifactID string) string {
	return "/api/v1/app/artifact/" + artifactID + "/content"
}

// Resource is the resource of a zylon-resource block (docs/api.md).
type Resource struct {
	ArtifactID  string `json:"artifact_id"`
	FileID      string `json:"file_id"`
	Name        string `json:"name"`
	Path        string `json:"path"`
	MimeType    string `json:"mime_type"`
	SizeBytes   int64  `json:"size_bytes"`
	SHA256      string `json:"sha256"`
	DownloadURL string `json:"download_url"`
	PreviewURL  string `json:"preview_url"`
}

// ResourceOf returns the zylon-resource view of an artifact.
func ResourceOf(a artifact.Artifact) Resource {
	return Resource{
		ArtifactID: a.ID, FileID: file.EncodeID(a.Path), Name: a.Name, Path: a.Path, MimeType: a.MimeType,
		SizeBytes: a.SizeBytes, SHA256: a.SHA256,
		DownloadURL: ArtifactURL(a.ID), PreviewURL: ArtifactURL(a.ID) + "?disposition=inline",
	}
}

// resourceBlock is the content block announcing an artifact.
func resourceBlock(a artifact.Artifact) wire.ContentBlock {
	raw, _ := json.Marshal(struct {
		Type     string   `json:"type"`
		Resource Resource `json:"resource"`
	}{BlockResource, ResourceOf(a)})
	return wire.ContentBlock{Type: BlockResource, Raw: raw}
}

// capture saves every new or changed file of the container's outputs as an
// artifact of the thread's project, and returns the new artifacts. A file
// is hashed only when its size, modification time or inode changed since
// it was last seen; it becomes a new version only when its content did.
// Failures are logged: a tool call is not undone by them. The org's storage
// quota is measured once, at the first file to copy; a file that does not
// fit what is left stays in outputs, downloadable, but is not kept. At most
// Deps.MaxArtifactsPerCall artifacts are made; deferred counts the new or
// changed files left past that cap for the next call (in name order).
func (s *Service) capture(ctx context.Context, th thread.Thread, containerID, toolUseID string) (out []artifact.Artifact, deferred int) {
	if s.d.Container == nil || s.d.Blobs == nil {
		return nil, 0
	}
	infos, err := s.d.Container.Walk(ctx, containerID, sandbox.OutputsDir)
	if err != nil {
		if !errors.Is(err, file.ErrNotFound) {
			s.log.Warn("artifact capture: list outputs", "thread", th.ID(), "err", err)
		}
		return nil, 0
	}
	s.mu.Lock()
	seen := s.seen[th.ID()]
	if seen == nil {
		seen = map[string]stamp{}
		s.seen[th.ID()] = seen
	}
	s.mu.Unlock()
	left, measured := int64(-1), s.d.Quota == nil
	saved := 0
	for _, info := range infos {
		if info.Dir {
			continue
		}
		p := path.Join(sandbox.OutputsDir, info.Rel)
		s.mu.Lock()
		prev, ok := seen[p]
		s.mu.Unlock()
		if ok && prev == stampOf(info) {
			continue
		}
		if saved == s.d.MaxArtifactsPerCall {
			// Past the cap: not seen yet, so the next call takes it.
			deferred++
			continue
		}
		if info.Size > s.d.MaxArtifactBytes {
			// Too large to copy to the host's disk (a sparse file, say): it
			// stays in outputs, downloadable, but is not kept as an artifact.
			s.log.Warn("artifact capture: output too large", "thread", th.ID(), "path", p, "size", info.Size, "max", s.d.MaxArtifactBytes)
			s.mu.Lock()
			seen[p] = stampOf(info)
			s.mu.Unlock()
			continue
		}
		if !measured {
			measured = true
			if err = retryUnavailable(ctx, func() (err error) {
				left, err = s.d.Quota.StorageLeft(ctx, th.OrgID())
				return err
			}); err != nil {
				if fault.KindOf(err) != fault.TooLarge {
					s.log.Warn("artifact capture: storage quota", "thread", th.ID(), "err", err)
					return out, 0
				}
				left = 0
			}
		}
		if left >= 0 && info.Size > left {
			s.log.Warn("artifact capture: output does not fit the org's storage quota", "thread", th.ID(), "path", p, "size", info.Size, "left", left, "quota", string(org.StorageBytesPerOrg))
			s.mu.Lock()
			seen[p] = stampOf(info)
			s.mu.Unlock()
			continue
		}
		// What the code wrote is synced before it is announced: an output
		// an acknowledged turn named must not come back empty after a
		// crash. Only this file and its folders: nothing another tenant
		// wrote is waited for.
		if err := s.d.Container.SyncFile(ctx, containerID, p); err != nil && !errors.Is(err, file.ErrNotFound) && !errors.Is(err, errors.ErrUnsupported) {
			s.log.Warn("artifact capture: sync output", "thread", th.ID(), "path", p, "err", err)
		}
		var (
			a       artifact.Artifact
			changed bool
		)
		err := retryUnavailable(ctx, func() (err error) {
			a, changed, err = s.saveArtifact(ctx, th, containerID, toolUseID, p)
			return err
		})
		if err != nil {
			s.log.Warn("artifact capture", "thread", th.ID(), "path", p, "err", err)
			continue
		}
		s.mu.Lock()
		seen[p] = stampOf(info)
		s.mu.Unlock()
		if changed {
			saved++
			out = append(out, a)
			if left >= 0 {
				left = max(left-a.SizeBytes, 0)
			}
		}
	}
	if deferred > 0 {
		s.log.Warn("artifact capture: more outputs than one tool call saves", "thread", th.ID(), "saved", saved, "deferred", deferred, "max", s.d.MaxArtifactsPerCall)
	}
	return out, deferred
}

// DefaultMaxArtifactsPerCall is how many artifacts one tool call makes at
// most: each output is hashed, copied and recorded in the call's wake, and
// one call could otherwise write a hundred thousand.
const DefaultMaxArtifactsPerCall = 100

// deferredNote is the text block a turn shows after a tool call that left
// deferred new or changed outputs unsaved (capture's cap).
func deferredNote(deferred, limit int) wire.ContentBlock {
	files := "files"
	if deferred == 1 {
		files = "file"
	}
	return wire.ContentBlock{Type: wire.BlockText, Text: fmt.Sprintf(
		"[threadbox] This tool call saved as many artifacts as one call saves (%d); %d more new or changed %s in %s/ were not saved. They stay in the outputs folder, downloadable, and each later tool call saves up to %d more.",
		limit, deferred, files, sandbox.OutputsDir, limit)}
}

// unavailableRetries are the waits before each new try of a capture step
// that met an unavailable database (restarting): an acknowledged turn's
// outputs are then still announced with it.
var unavailableRetries = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}

// retryUnavailable runs fn, and again after each of unavailableRetries while
// it fails as unavailable and ctx lives.
func retryUnavailable(ctx context.Context, fn func() error) error {
	err := fn()
	for _, wait := range unavailableRetries {
		if !fault.Is(err, fault.Unavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		err = fn()
	}
	return err
}

// DefaultMaxArtifactBytes is the largest output file kept as an artifact.
const DefaultMaxArtifactBytes = 1 << 30

// saveArtifact copies one output file into the blob store and records a
// new version unless its content equals the latest version's.
func (s *Service) saveArtifact(ctx context.Context, th thread.Thread, containerID, toolUseID, p string) (artifact.Artifact, bool, error) {
	f, info, err := s.d.Container.Open(ctx, containerID, p)
	if err != nil {
		return artifact.Artifact{}, false, fmt.Errorf("open: %w", err)
	}
	defer f.Close()
	head := make([]byte, filetype.SniffLen)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return artifact.Artifact{}, false, fmt.Errorf("read: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return artifact.Artifact{}, false, fmt.Errorf("rewind: %w", err)
	}
	// From writing the blob to committing its row, no deletion of
	// artifacts may remove the blob as unreferenced (releaseBlobs).
	unlock, err := s.blobs.shared(ctx, s.d.BlobLock)
	if err != nil {
		return artifact.Artifact{}, false, err
	}
	defer unlock()
	// The file may grow after it was listed: never copy more than the cap.
	sum, size, err := s.d.Blobs.Put(ctx, io.LimitReader(f, s.d.MaxArtifactBytes+1))
	if err != nil {
		return artifact.Artifact{}, false, err
	}
	if size > s.d.MaxArtifactBytes {
		return artifact.Artifact{}, false, fmt.Errorf("output grew past %d bytes while it was copied", s.d.MaxArtifactBytes)
	}
	latest, err := s.artifacts.LatestArtifact(ctx, th.ProjectID(), th.ID(), p)
	version := 1
	switch {
	case err == nil && latest.SHA256 == sum:
		return latest, false, nil
	case err == nil:
		version = latest.Version + 1
	case !fault.Is(err, fault.NotFound):
		return artifact.Artifact{}, false, err
	default:
		// The thread's first version of the path: a copy of one the
		// project has (a fork copies its source's outputs) is not new.
		if same, err := s.artifacts.ArtifactWithContent(ctx, th.ProjectID(), p, sum); err == nil {
			return same, false, nil
		} else if !fault.Is(err, fault.NotFound) {
			return artifact.Artifact{}, false, err
		}
	}
	name := path.Base(info.Rel)
	a := artifact.Artifact{
		ID: id.New("art"), OrgID: th.OrgID(), ProjectID: th.ProjectID(), ThreadID: th.ID(), CreatedBy: th.OwnerID(), ToolUseID: toolUseID,
		Path: p, Name: name, MimeType: filetype.Detect(name, head[:n]).MIME, SizeBytes: size, SHA256: sum,
		Version: version, CreatedAt: s.now().UTC(),
	}
	if err := s.artifacts.CreateArtifact(ctx, a); err != nil {
		return artifact.Artifact{}, false, err
	}
	return a, true, nil
}

// Artifacts lists one page of the artifacts of a project of the caller's
// org, in the page's order, and whether more follow. page.Limit must be 1 to
// artifact.MaxPage (zero: artifact.DefaultPage); page.After, when set, must
// be an artifact of the project.
func (s *Service) Artifacts(ctx context.Context, p user.Principal, projectID string, page artifact.Page) ([]artifact.Artifact, bool, error) {
	if page.Limit == 0 {
		page.Limit = artifact.DefaultPage
	}
	if page.Limit < 1 || page.Limit > artifact.MaxPage {
		return nil, false, fault.Errorf(fault.Invalid, "limit must be between 1 and %d", artifact.MaxPage)
	}
	if _, err := s.store.Project(ctx, p.OrgID, projectID); err != nil {
		return nil, false, err
	}
	limit := page.Limit
	page.Limit++
	as, err := s.artifacts.ArtifactsByProject(ctx, p.OrgID, projectID, page)
	if err != nil {
		return nil, false, err
	}
	if len(as) > limit {
		return as[:limit], true, nil
	}
	return as, false, nil
}

// Artifact returns an artifact of a project of the caller's org.
func (s *Service) Artifact(ctx context.Context, p user.Principal, artifactID string) (artifact.Artifact, error) {
	return s.artifacts.Artifact(ctx, p.OrgID, artifactID)
}

// ArtifactContent opens an artifact's content for download, under the
// org's downloads.generated switch. The caller closes Body.
func (s *Service) ArtifactContent(ctx context.Context, p user.Principal, artifactID string) (files.Content, error) {
	a, err := s.artifacts.Artifact(ctx, p.OrgID, artifactID)
	if err != nil {
		return files.Content{}, err
	}
	if err := s.policyAllows(ctx, p.OrgID, org.DownloadsGenerated); err != nil {
		return files.Content{}, err
	}
	body, err := s.d.Blobs.Open(ctx, a.SHA256)
	if err != nil {
		return files.Content{}, err
	}
	head := make([]byte, filetype.SniffLen)
	n, err := io.ReadFull(body, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		body.Close()
		return files.Content{}, fmt.Errorf("workspace: read artifact: %w", err)
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		body.Close()
		return files.Content{}, fmt.Errorf("workspace: rewind artifact: %w", err)
	}
	t := filetype.Detect(a.Name, head[:n])
	return files.Content{File: files.File{
		ID: file.EncodeID(a.Path), Path: a.Path, CreatedAt: a.CreatedAt, Filename: a.Name, MIMEType: t.MIME,
		SizeBytes: a.SizeBytes, Downloadable: true, ETag: a.SHA256, ScopeID: a.ThreadID, Inline: t.Inline,
	}, Body: body, Source: "blob:" + a.SHA256}, nil
}

// Presigner makes time-limited download URLs of blobs (infra/blob.S3).
type Presigner interface {
	// Presign returns a URL that downloads the blob for expiry, answered
	// with the given Content-Type and Content-Disposition.
	Presign(ctx context.Context, sha256, contentType, disposition string, expiry time.Duration) (string, error)
}

// ArtifactRedirect returns a presigned URL of the store to send a client
// to instead of streaming the content of f (from ArtifactContent, whose
// checks it relies on), or "" when downloads stream through the server
// (Deps.PresignExpiry unset, or a store that cannot presign).
func (s *Service) ArtifactRedirect(ctx context.Context, f files.File, contentType, disposition string) (string, error) {
	pr, ok := s.d.Blobs.(Presigner)
	if s.d.PresignExpiry <= 0 || !ok {
		return "", nil
	}
	return pr.Presign(ctx, f.ETag, contentType, disposition, s.d.PresignExpiry)
}
