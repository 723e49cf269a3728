// Package files holds the Files API use cases (docs/api.md): uploads, keyed
// puts, listing, metadata, downloads under the org policy, and deletes, over
// a container's files addressed by file id (the base64url of the sandbox
// path). The same use cases serve the Workspace API's thread file routes,
// whose scope is the thread id.
package files

import (
	"context"
	"io"
	"time"

	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// Store reads and writes container files by container storage id and
// absolute sandbox path. Errors wrap the file package's values
// (file.ErrNotFound, file.ErrTooLarge, file.ErrSymlink, file.ErrNotRegular,
// file.ErrReadOnly) or a *file.MountError. Info.Rel is relative to the mount
// that holds the path. infra/fsroot.Containers implements it.
type Store interface {
	// Stat describes the regular file or folder at sandboxPath.
	Stat(ctx context.Context, containerID, sandboxPath string) (file.Info, error)
	// Open opens the regular file at sandboxPath for reading.
	Open(ctx context.Context, containerID, sandboxPath string) (io.ReadSeekCloser, file.Info, error)
	// Walk returns every regular file under the folder at sandboxPath.
	Walk(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error)
	// Write stores r at sandboxPath atomically, at most limit bytes,
	// creating parents and replacing what was there.
	Write(ctx context.Context, containerID, sandboxPath string, r io.Reader, limit int64) (file.Info, error)
	// Remove deletes the file at sandboxPath.
	Remove(ctx context.Context, containerID, sandboxPath string) error
	// RemovePrefix deletes the regular files of mount m whose path within
	// the mount starts with prefix, and returns how many.
	RemovePrefix(ctx context.Context, containerID string, m file.Mount, prefix string) (int, error)
}

// Containers maps a Files API scope_id (a container id the client chose, or
// a thread id) to the storage id of the container the caller may use.
type Containers interface {
	// Container returns the storage id of the container scopeID names for
	// p. With create it makes the container (and its host folders) when it
	// does not exist yet; without, an unknown one is a fault.NotFound. A
	// container p may not use is a fault.NotFound too.
	Container(ctx context.Context, p user.Principal, scopeID string, create bool) (string, error)
	// StorageID returns the storage id scopeID names for p, whether or
	// not the container exists (one removed at its maximum age keeps its
	// retained files under it), without making anything.
	StorageID(ctx context.Context, p user.Principal, scopeID string) (string, error)
}

// Policies returns an org's feature policy (app/admin.Service has this
// method).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Quota bounds what an org stores (app/quota.Service).
type Quota interface {
	// StorageLeft returns how many more bytes the org may store, or -1
	// without a storage quota; an org with nothing left is refused with a
	// fault.TooLarge naming the quota.
	StorageLeft(ctx context.Context, orgID string) (int64, error)
}

// Saved is the remembered outcome of an upload made with an Idempotency-Key.
type Saved struct {
	Fingerprint string // what the request asked for; a reuse must match it
	File        File   // the answer; zero while Pending
	At          time.Time
	Pending     bool // the upload holding the key has not finished
}

// Idempotency remembers uploads by Idempotency-Key for a while. A key is
// claimed before its upload runs, so two requests with one key never both
// store: the later one sees the first in progress.
type Idempotency interface {
	// Claim reserves key for an upload asking for fingerprint and reports
	// true; the caller then Saves or Releases it. When the key is held, by
	// a finished upload or by one in progress, Claim returns that entry and
	// false. A claim lapses after ClaimTTL, a finished entry after its TTL.
	Claim(ctx context.Context, key, fingerprint string) (Saved, bool, error)
	// Save remembers the finished upload s under a claimed key.
	Save(ctx context.Context, key string, s Saved) error
	// Release gives up a claim whose upload failed, so a retry may run.
	Release(ctx context.Context, key string) error
}

// Record is what the database keeps of a file beside its container: its
// expiry (an upload made with expires_in_seconds) and, once its container
// was removed at its maximum age, its content in the blob store (an
// output file retained so that it stays downloadable until deleted).
type Record struct {
	ContainerID string // the container's storage id
	Path        string // the absolute sandbox path; the file id encodes it
	OrgID       string
	OwnerID     string
	SHA256      string // the content in Blobs; "" while the file lives in its container
	SizeBytes   int64
	CreatedAt   time.Time
	ExpiresAt   time.Time // zero: the file does not expire
}

// Retained reports whether the record holds the file's content.
func (r Record) Retained() bool { return r.SHA256 != "" }

// Expired reports whether the record's file has expired at now.
func (r Record) Expired(now time.Time) bool { return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt) }

// Records stores file records (infra/store.Store).
type Records interface {
	// FileRecord returns the record of a file; fault.NotFound when none.
	FileRecord(ctx context.Context, containerID, sandboxPath string) (Record, error)
	// FileRecords returns every record of a container.
	FileRecords(ctx context.Context, containerID string) ([]Record, error)
	// PutFileRecord inserts or replaces a record.
	PutFileRecord(ctx context.Context, r Record) error
	// DeleteFileRecord deletes a record (none is not an error).
	DeleteFileRecord(ctx context.Context, containerID, sandboxPath string) error
	// DeleteFileRecords deletes every record of a container.
	DeleteFileRecords(ctx context.Context, containerID string) error
	// ExpiredFileRecords returns up to limit records expired at now.
	ExpiredFileRecords(ctx context.Context, now time.Time, limit int) ([]Record, error)
	// FileContentReferenced reports whether a record holds the content.
	FileContentReferenced(ctx context.Context, sha256 string) (bool, error)
}

// Blobs is the content-addressed store of retained files (infra/blob).
type Blobs interface {
	// Put stores r and returns its hex SHA-256 and size.
	Put(ctx context.Context, r io.Reader) (string, int64, error)
	// Open opens the content with the given SHA-256.
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
	// Remove deletes a blob last written before writtenBefore.
	Remove(ctx context.Context, sha256 string, writtenBefore time.Time) (bool, error)
}
