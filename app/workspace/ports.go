package workspace

import (
	"context"
	"io"
	"log/slog"
	"time"

	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/domain/artifact"
	"threadbox/domain/audit"
	"threadbox/domain/container"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/skill"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// Store is the persistence the workspace needs.
type Store interface {
	projectStore
	threadStore
	artifact.Repository
	artifactRefs
	turn.Repository
}

// Turns is the front door every turn runs through (app/turns.Service).
type Turns interface {
	// Model resolves a requested model name ("" or "default" is the
	// configured model).
	Model(name string) string
	// Run checks and runs req for p with opts, sending its events to sink;
	// a turn that offers tools gets its sandbox variables for the run.
	Run(ctx context.Context, p user.Principal, req *messages.Request, opts messages.RunOptions, sink messages.Sink) error
}

// Containers resolves and manages thread containers (app/containers.Service).
type Containers interface {
	// Scope resolves a thread id the caller may access to its container,
	// creating it and preparing its folders.
	Scope(ctx context.Context, p user.Principal, scopeID string, create bool) (container.Container, error)
	// ExpiresAt is the container's rolling expiry shown to clients.
	ExpiresAt(c container.Container) time.Time
	// Remove stops the container's sandbox and deletes its files and record.
	Remove(ctx context.Context, containerID string) error
}

// ThreadFiles are the Files API use cases, with the thread id as scope
// (app/files.Service).
type ThreadFiles interface {
	Upload(ctx context.Context, p user.Principal, req files.UploadRequest) (files.File, error)
	Put(ctx context.Context, p user.Principal, scopeID, key string, body io.Reader, limit int64) (files.File, error)
	OpenPath(ctx context.Context, p user.Principal, scopeID, sandboxPath string) (files.Content, error)
}

// ContainerFiles reads and writes a container's files by storage id and
// absolute sandbox path, confined to its folders (infra/fsroot.Containers).
type ContainerFiles interface {
	// Walk returns every regular file under the folder at sandboxPath;
	// Info.Rel is relative to the mount.
	Walk(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error)
	// Open opens the regular file at sandboxPath.
	Open(ctx context.Context, containerID, sandboxPath string) (io.ReadSeekCloser, file.Info, error)
	// Write stores r at sandboxPath, at most limit bytes (negative: no limit).
	Write(ctx context.Context, containerID, sandboxPath string, r io.Reader, limit int64) (file.Info, error)
}

// Syncer is a ContainerFiles that can make one file durable, with the
// folder entries that lead to it (infra/fsroot.Containers): the outputs a
// turn announces must outlive a crash, or a full disk under the container's
// file system. Only the announced files are synced, never a whole file
// system, which on a disk the containers share would make each tool call
// wait for every tenant's writes.
type Syncer interface {
	SyncFile(ctx context.Context, containerID, sandboxPath string) error
}

// Blobs is the content-addressed artifact store (infra/blob.Store).
type Blobs interface {
	// Put stores r and returns its hex SHA-256 and size. Storing content
	// that is there already restarts its write time.
	Put(ctx context.Context, r io.Reader) (string, int64, error)
	// Open opens the content with the given SHA-256.
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
	// Walk calls fn with every stored blob's SHA-256 and last write time,
	// stopping at fn's first error.
	Walk(ctx context.Context, fn func(sha256 string, written time.Time) error) error
	// Remove deletes a blob if it was last written before writtenBefore
	// (zero: whatever its age) and reports whether it did; a missing blob
	// is not an error. The age is checked atomically with respect to Put.
	Remove(ctx context.Context, sha256 string, writtenBefore time.Time) (bool, error)
}

// Skills finds skills by name and loads them into containers
// (app/skills.Service).
type Skills interface {
	// ByName finds the latest version of each named skill (a name or a
	// version id) of the org.
	ByName(ctx context.Context, orgID string, refs []string) ([]skill.Skill, error)
	// Load makes the container hold exactly skills at /mnt/skills.
	Load(ctx context.Context, containerID string, skills []skill.Skill) error
}

// Policies returns an org's feature policy (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Quota checks the org policy's quotas (app/quota.Service).
type Quota interface {
	// BeforeRun refuses (fault.RateLimited, naming the quota) a turn
	// that may boot the sandbox of container containerID when the user or
	// the org has as many sandboxes running as the policy allows; nothing
	// is refused while that container's sandbox runs.
	BeforeRun(ctx context.Context, orgID, userID, containerID string) error
	// StorageLeft returns how many more bytes the org may store, or -1
	// without a storage quota; an org with nothing left is refused.
	StorageLeft(ctx context.Context, orgID string) (int64, error)
	// BeforeStore refuses (fault.TooLarge, naming the quota) storing n
	// more bytes past the org's storage quota; with n zero it refuses an
	// org with nothing left.
	BeforeStore(ctx context.Context, orgID string, n int64) error
}

// Deps are the ports of the turn, file, skill and artifact use cases.
type Deps struct {
	Turns      Turns
	Containers Containers
	Files      ThreadFiles
	Container  ContainerFiles
	Blobs      Blobs
	// BlobLock, when set, orders artifact saves against blob removals
	// across every server on the database (infra/store.Store); without
	// it the order is this process's alone.
	BlobLock BlobLock
	// PresignExpiry, when positive and Blobs can presign, makes artifact
	// downloads redirect to a URL of the store valid that long
	// (BLOB_PRESIGN=true) instead of streaming through the server.
	PresignExpiry time.Duration
	Skills        Skills
	Policies      Policies
	// MaxTokens caps each model step of a turn (default 4096).
	MaxTokens int
	// MaxArtifactBytes caps the output files kept as artifacts (default
	// DefaultMaxArtifactBytes): the artifact store is on the host's disk,
	// outside every container's quota.
	MaxArtifactBytes int64
	// MaxArtifactsPerCall caps the output files one tool call saves as
	// artifacts (default DefaultMaxArtifactsPerCall); the rest wait in
	// outputs for the next call, and the turn says so.
	MaxArtifactsPerCall int
	// BlobGrace is how long CollectArtifactBlobs keeps a blob that no
	// artifact references (default DefaultBlobGrace).
	BlobGrace time.Duration
	// Leases, when set, are the database leases of this process
	// (app/lease.Keeper): a thread's turn runs under one, so two servers on
	// one database never run two turns of a thread at once. Without it the
	// lock is this process's alone.
	Leases Leases
	// Quota, when set, refuses turns past the running-sandbox quotas and
	// keeps turns, forks and artifacts within the storage quota.
	Quota Quota
	// TurnLogRetention is how long the event log of an ended turn is kept
	// (default DefaultTurnLogRetention).
	TurnLogRetention time.Duration
	// TurnLogMaxBytes caps the bytes of one turn's event log (default
	// DefaultTurnLogMaxBytes): past it the log holds a LogTruncated event
	// and then only the events that end the stream.
	TurnLogMaxBytes int64
	// Audit, when set, records project renames and deletions in the org's
	// audit log.
	Audit Auditor
	Now   func() time.Time
	Log   *slog.Logger
}

// Auditor appends events to the org's audit log (audit.Repository).
type Auditor interface {
	AppendEvent(ctx context.Context, e audit.Event) error
}

// Leases take and give back named leases shared by every server process on
// the database.
type Leases interface {
	// Acquire takes the named lease; false when another holder has it.
	Acquire(ctx context.Context, name string) (bool, error)
	// Release gives the named lease back.
	Release(ctx context.Context, name string) error
	// Holds reports whether this process (mine) or another live one
	// (other) holds the named lease.
	Holds(ctx context.Context, name string) (mine, other bool, err error)
}
