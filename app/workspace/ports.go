package workspace

import (
	"context"
	"io"
	"log/slog"
	"time"

	"threadbox/app/files"
	"threadbox/app/messages/wire"
	"threadbox/app/tools"
	"threadbox/app/turns"
	"threadbox/domain/artifact"
	"threadbox/domain/audit"
	"threadbox/domain/container"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// Store keeps projects, threads and their messages (infra/store.Threads).
type Store interface {
	projectStore
	threadStore
}

// Artifacts keeps the artifacts saved from threads and tells which blobs
// they reference (infra/store.Artifacts).
type Artifacts interface {
	artifact.Repository
	artifactRefs
}

// Turns is the head every turn is prepared by, and the log of the turns
// that run detached (app/turns.Service).
type Turns interface {
	// Prepare checks a chat turn's request and resolves what it runs with
	// (model, quotas, the thread's container, uploads, skills); nothing is
	// made for a turn it refuses.
	Prepare(ctx context.Context, p user.Principal, req *wire.Request, th *turns.Thread) (*turns.Turn, error)
	// Detach runs a turn apart from the request that started it and
	// returns its id.
	Detach(ctx context.Context, d turns.Detached) (string, error)
	// Follow replays and follows a thread's turn's log until it ends.
	Follow(ctx context.Context, threadID, turnID string, after int64, held turns.Held, send func(turn.Event) error) (turns.Ending, error)
	// Turn returns a thread's turn; Stop stops it.
	Turn(ctx context.Context, threadID, turnID string) (turn.Turn, error)
	Stop(ctx context.Context, threadID, turnID string) (turn.Turn, error)
	// Running returns the thread's turn that runs now, on any server.
	Running(ctx context.Context, threadID string, held turns.Held) (turn.Turn, error)
	// EndThread ends the turn running in a thread about to be deleted.
	EndThread(ctx context.Context, threadID string) error
}

// Containers resolves and manages thread containers (app/containers.Service).
type Containers interface {
	// Scope resolves a thread id the caller may access to its container,
	// creating it and preparing its folders.
	Scope(ctx context.Context, p user.Principal, scopeID string, create bool) (container.Container, error)
	// Peek returns the container a scope id names without making or
	// preparing anything; ok is false when there is none yet.
	Peek(ctx context.Context, p user.Principal, scopeID string) (c container.Container, ok bool, err error)
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
	// CopyFile copies the regular file at sandboxPath of container from
	// to the same path of container to, at most limit bytes of data, and
	// returns the copy and the bytes it stores. Where the files are kept
	// by their data (infra/fsroot), a file's holes stay holes, so a fork
	// copies a sandbox's `truncate -s 1T` file as its few written blocks,
	// as Walk counts it (file.Info.Data); elsewhere the copy is whole.
	CopyFile(ctx context.Context, from, to, sandboxPath string, limit int64) (file.Info, int64, error)
	// SyncFile makes the regular file at sandboxPath durable, with the
	// folder entries that lead to it: the outputs a turn announces must
	// outlive a crash, or a full disk under the container's file system.
	// Only the announced files are synced, never a whole file system,
	// which on a disk the containers share would make each tool call wait
	// for every tenant's writes. Files it cannot reach answer
	// errors.ErrUnsupported (the kubernetes pods' volumes).
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

// Policies returns an org's feature policy (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Quota checks the org policy's storage quota (app/quota.Service).
type Quota interface {
	// StorageLeft returns how many more bytes the org may store, or -1
	// without a storage quota; an org with nothing left is refused.
	StorageLeft(ctx context.Context, orgID string) (int64, error)
	// BeforeStore refuses (fault.TooLarge, naming the quota) storing n
	// more bytes past the org's storage quota; with n zero it refuses an
	// org with nothing left.
	BeforeStore(ctx context.Context, orgID string, n int64) error
}

// Deps are the ports of the turn, file and artifact use cases.
type Deps struct {
	Turns      Turns
	Containers Containers
	Files      ThreadFiles
	Container  ContainerFiles
	Blobs      Blobs
	// BlobLock, when set, orders artifact saves against blob removals
	// across every server on the database (infra/store.Locks); without
	// it the order is this process's alone.
	BlobLock BlobLock
	// PresignExpiry, when positive and Blobs can presign, makes artifact
	// downloads redirect to a URL of the store valid that long
	// (BLOB_PRESIGN=true) instead of streaming through the server.
	PresignExpiry time.Duration
	// Policies give the org's features the injection rules follow.
	Policies Policies
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
	// Quota, when set, keeps forks and artifacts within the storage quota
	// (app/turns asks the quotas of turns).
	Quota Quota
	// Snapshots, when set, snapshot each thread's files at the end of its
	// turns, which rewind and fork at a turn restore.
	Snapshots Snapshots
	// Audit, when set, records project renames and deletions in the org's
	// audit log.
	Audit Auditor
	// Titles, when set, writes the title of a thread after its first
	// exchange; without it the title proposed from the first message's
	// first line stays.
	Titles Titles
	// Terminals, when set, are the tool kit's exec_command sessions that
	// the thread's terminal view lists, replays and follows.
	Terminals Terminals
	Now       func() time.Time
	Log       *slog.Logger
}

// Titles asks the model for a thread's title (app/turns.Service).
type Titles interface {
	// Title returns the title model writes for exchange, the thread's
	// first message and answer as text.
	Title(ctx context.Context, p user.Principal, model, exchange string) (string, error)
}

// Terminals are the exec_command sessions the tool kit keeps for each
// container (app/tools.Executor); a thread's container id is its id.
type Terminals interface {
	// Sessions lists the container's sessions, oldest first.
	Sessions(containerID string) []tools.SessionInfo
	// Session describes one; fault.NotFound when there is none.
	Session(containerID, sessionID string) (tools.SessionInfo, error)
	// Watch sends the session's output after since, then its output as
	// it arrives, until the session or ctx ends.
	Watch(ctx context.Context, containerID, sessionID string, since int64, send func(tools.Chunk) error) (tools.SessionInfo, error)
	// Input types data into the session's terminal.
	Input(containerID, sessionID string, data []byte) error
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
