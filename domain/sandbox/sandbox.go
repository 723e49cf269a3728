// Package sandbox declares the sandbox port: the few operations every
// sandbox backend (docker, local, ...) offers, and the values they exchange.
package sandbox

import (
	"context"
	"errors"
	"net"
	"time"
)

// Sandbox paths inside every sandbox (docs/api.md).
const (
	WorkspaceDir = "/home/agent/workspace"
	UploadsDir   = "/mnt/user-data/uploads"
	OutputsDir   = "/mnt/user-data/outputs"
	SkillsDir    = "/mnt/skills"
	// AgentDir holds the threadbox agent, read-only, in every sandbox;
	// AgentPath is the agent binary, the sandbox's init.
	AgentDir  = "/opt/threadbox"
	AgentPath = AgentDir + "/agent"
)

// ErrUnavailable reports that the sandbox could not run the command: it was
// killed, the backend went away, or it could not be started.
var ErrUnavailable = errors.New("sandbox unavailable")

// ErrNotFound reports that no sandbox exists for the id.
var ErrNotFound = errors.New("sandbox not found")

// ErrNoSession reports that the sandbox runs no command to attach to
// (Command.Attach).
var ErrNoSession = errors.New("no such session in the sandbox")

// ErrUnsupported reports that the backend does not offer the operation
// (sessions, forwarding): the capability is stated by the answer, never by
// a type check that a wrapper could hide.
var ErrUnsupported = errors.New("not supported by this sandbox backend")

// ErrNoBackend reports that no sandbox backend is configured: code
// execution is off for the whole server. Its text is the error message
// Anthropic's API gives when no code-execution provider is set up.
var ErrNoBackend = errors.New("code_execution provider is not configured.")

// ErrFoldersReadOnly reports that a container's folders are on a file
// system that went read-only under it (its quota image met I/O errors: the
// server's disk filled). The owner stops the container's sandbox and has
// the folders repaired before they serve again.
var ErrFoldersReadOnly = errors.New("the container's file system went read-only")

// Verdict is what the owner decides about a sandbox a backend found running
// that this process did not boot (Reconcile).
type Verdict int

// The verdicts.
const (
	// Leave keeps the sandbox as it is: another live process holds it.
	Leave Verdict = iota
	// Adopt takes the sandbox over: its record is live and nobody holds it.
	Adopt
	// Drop removes the sandbox: no live record claims it.
	Drop
	// Stop ends the sandbox and keeps its files: its record is live but
	// says no sandbox runs (stopped while idle, or by a process that went
	// away). Backends whose files are the caller's (host folders) treat it
	// as Drop; one whose files live with the sandbox (the kubernetes
	// backend's claims) deletes only the running part.
	Stop
)

// State is the running state of one sandbox.
type State string

// The states a sandbox can be in.
const (
	StateRunning State = "running"
	StateStopped State = "stopped"
	StateMissing State = "missing"
)

// Mount binds a host folder into the sandbox.
type Mount struct {
	Source   string // absolute host path
	Target   string // absolute sandbox path
	ReadOnly bool
}

// Limits bound what one sandbox may use. Zero means the backend default.
type Limits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	NoFile      int64
	DiskBytes   int64
	TmpBytes    int64
}

// DefaultLimits are the limits of a sandbox whose settings name none
// (5 GiB of memory, 1 CPU, 5 GiB of files, a bounded number of
// processes), the same for every backend.
func DefaultLimits() Limits {
	return Limits{MemoryBytes: 5 << 30, CPUs: 1, Pids: 512, NoFile: 4096, DiskBytes: 5 << 30, TmpBytes: 512 << 20}
}

// CPUPeriodMicros is the period over which a sandbox's CPU limit is
// enforced (the CFS bandwidth period). The kernel's default of 100 ms lets a
// sandbox that runs on every CPU spend its quota early in the period and then
// wait for the rest of it, a stall of tens of milliseconds for each of its
// processes; 10 ms bounds that stall to a few milliseconds for the same share.
const CPUPeriodMicros = 10_000

// CPUQuotaMicros is the CPU time the sandbox may use in each period of
// CPUPeriodMicros: CPUs of them (at least the kernel's 1 ms minimum).
func (l Limits) CPUQuotaMicros() int64 {
	return max(1000, int64(l.CPUs*CPUPeriodMicros))
}

// Or returns l with each zero (or negative) field taken from d.
func (l Limits) Or(d Limits) Limits {
	return Limits{
		MemoryBytes: positiveOr(l.MemoryBytes, d.MemoryBytes),
		CPUs:        positiveOr(l.CPUs, d.CPUs),
		Pids:        positiveOr(l.Pids, d.Pids),
		NoFile:      positiveOr(l.NoFile, d.NoFile),
		DiskBytes:   positiveOr(l.DiskBytes, d.DiskBytes),
		TmpBytes:    positiveOr(l.TmpBytes, d.TmpBytes),
	}
}

// positiveOr returns v when it is positive, else d.
func positiveOr[T int64 | float64](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// FolderTargets are the folders of every sandbox as mounts without a
// source, in the order hostdirs binds them: uploads and skills read-only.
// A warm sandbox (Backend.Warm) is booted with these.
func FolderTargets() []Mount {
	return []Mount{
		{Target: WorkspaceDir},
		{Target: UploadsDir, ReadOnly: true},
		{Target: OutputsDir},
		{Target: SkillsDir, ReadOnly: true},
	}
}

// SameTargets reports whether a and b bind the same targets, in the same
// order and with the same read-only flags (their sources aside).
func SameTargets(a, b []Mount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Target != b[i].Target || a[i].ReadOnly != b[i].ReadOnly {
			return false
		}
	}
	return true
}

// Spec describes the sandbox to boot for a container.
type Spec struct {
	ID     string // the container id; backends derive their own names from it
	Mounts []Mount
	Limits Limits
	Env    []string // KEY=value pairs set for every command
}

// Stream names an output stream of a command.
type Stream int

// The output streams.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// String names the stream: "stdout" or "stderr".
func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// CPUSeconds is a CPU time reported in seconds (by an in-sandbox driver)
// as a duration; a value that is not a finite, non-negative number of
// plausible size counts as none.
func CPUSeconds(sec float64) time.Duration {
	if !(sec >= 0) || sec > 1e9 {
		return 0
	}
	return time.Duration(sec * float64(time.Second))
}

// ExitWait bounds how long usage metering waits for the exit accounting of
// a long-lived process that a call ended or that was stopped during it.
const ExitWait = 2 * time.Second

// ExitCPU is the CPU time of a call that got no answer because it ended
// its long-lived process (an interpreter): what the process's exit
// accounting holds beyond the metered time of its earlier calls. It waits
// at most ExitWait for done, after which exit tells how the process ended;
// 0 when it did not end in time or its end is unknown.
func ExitCPU(done <-chan struct{}, exit func() (Result, error), metered time.Duration) time.Duration {
	select {
	case <-done:
	case <-time.After(ExitWait):
		return 0
	}
	res, err := exit()
	if err != nil || res.CPUTime <= metered {
		return 0
	}
	return res.CPUTime - metered
}

// OutputTo adapts a function taking a stream's name to Command.Output; nil
// stays nil.
func OutputTo(f func(stream string, chunk []byte)) func(Stream, []byte) {
	if f == nil {
		return nil
	}
	return func(s Stream, chunk []byte) { f(s.String(), chunk) }
}

// Command is one process to run inside a sandbox.
type Command struct {
	Args      []string      // argv; Args[0] is looked up in PATH
	Dir       string        // working directory; empty means WorkspaceDir
	Env       []string      // extra KEY=value pairs
	Timeout   time.Duration // zero means no timeout
	MaxOutput int           // cap per stream in bytes; zero means the backend default
	// OutputDir asks for a fresh empty directory exported as $OUTPUT_DIR whose
	// top-level regular files are moved into OutputsDir when the command ends.
	OutputDir bool
	Stdin     []byte
	// Output, when set, receives output chunks as they are produced (up to
	// the cap). It must not retain the slice.
	Output func(s Stream, chunk []byte)
	// Tag names a long-lived command (Backend.Session) so that a later
	// server can attach to it once its sandbox was restored from a
	// checkpoint; empty for none.
	Tag string
	// Attach makes Backend.Session attach to the running command tagged
	// Tag that an earlier server started in the sandbox before its
	// checkpoint, instead of starting one: its output from then on goes to
	// Output. ErrNoSession when there is none.
	Attach bool
}

// WarmUpCommand is run once in every warm sandbox before any claim. The
// first command a new sandbox runs costs about twice a later one (its
// file system's first lookups and loads of the shell and its libraries,
// the agent's first fork); run there, that cost is off the claim's path.
// A microVM template runs it before it is saved, so that the shell and
// its libraries are in the page cache of every copy. It leaves nothing
// behind: no file, no process.
var WarmUpCommand = Command{Args: []string{"bash", "-c", "/usr/bin/true"}, Timeout: 10 * time.Second}

// Result is how a command ended. A non-zero exit code is a result, not an error.
type Result struct {
	ExitCode        int
	Stdout          []byte
	Stderr          []byte
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	OOMKilled       bool
	OutputFiles     []string // sandbox paths moved into OutputsDir
	// Warning describes a non-fatal problem, such as output files that
	// could not be moved into OutputsDir (they are kept where it says).
	Warning  string
	Duration time.Duration
	// CPUTime is the command's CPU time (user plus system) as the sandbox
	// measured it; zero when the backend or an older agent does not report it.
	CPUTime time.Duration
}

// Status describes one sandbox as the backend sees it.
type Status struct {
	State     State
	StartedAt time.Time
}

// WarmPrefix begins the slot name of every warm sandbox (Backend.Warm),
// which no container id begins with.
const WarmPrefix = "warm-"

// Backend runs sandboxes. Implementations live in infra/sandbox/docker and
// infra/sandbox/local; the owner of sandboxes' lives is app/containers, the
// only caller.
type Backend interface {
	// Name is the backend's configuration name ("docker", "local").
	Name() string
	// Available reports why the backend cannot serve, or nil.
	Available(ctx context.Context) error
	// Isolation names the isolation level ("namespaces", "application
	// kernel", "microVM", "process jail").
	Isolation() string
	// EnforcedLimits names the limits enforced on this host ("memory",
	// "cpu", "pids", "nofile", "tmp", "disk") and the mechanism behind them;
	// nil when it cannot tell.
	EnforcedLimits(ctx context.Context) (limits []string, mechanism string)
	// Ensure boots the sandbox for spec.ID unless it is already running.
	Ensure(ctx context.Context, spec Spec) error
	// Warm boots a sandbox for the warm pool under the slot name spec.ID,
	// with spec's limits and environment and no tenant data: each of
	// spec.Mounts (whose Sources are empty) is an empty folder until Claim
	// binds a container's folder there. ErrUnsupported when the backend or
	// its runtime cannot bind folders into a running sandbox.
	Warm(ctx context.Context, spec Spec) error
	// Claim makes the warm sandbox slot the sandbox of spec.ID, binding
	// spec.Mounts into it; the slot name then names nothing. It fails when
	// the warm sandbox ended, spec.ID's sandbox runs, or spec's limits,
	// environment or mount targets differ from the warm sandbox's: the
	// caller then removes the slot and boots spec.ID cold.
	Claim(ctx context.Context, slot string, spec Spec) error
	// WarmSandboxes lists the slot names of the unclaimed warm sandboxes
	// of this backend's instance that exist on the host, whichever process
	// booted them and whether or not they still run: what the warm pool's
	// size bounds. ErrUnsupported when the backend keeps none.
	WarmSandboxes(ctx context.Context) ([]string, error)
	// Exec runs cmd in the running sandbox id and waits for it to end.
	Exec(ctx context.Context, id string, cmd Command) (Result, error)
	// Start starts a long-lived cmd in the running sandbox id and returns
	// once it runs; a nil tty runs it on pipes. cmd.Timeout and
	// cmd.MaxOutput are ignored. ErrUnsupported when the backend cannot.
	Start(ctx context.Context, id string, cmd Command, tty *TTY) (Session, error)
	// Listen listens on addr (a loopback host:port) inside the sandbox id
	// and hands each accepted connection to the host; the listener ends
	// with the sandbox. ErrUnsupported when the backend cannot.
	Listen(ctx context.Context, id, addr string) (net.Listener, error)
	// Stop shuts the sandbox down; its files stay.
	Stop(ctx context.Context, id string) error
	// Remove stops the sandbox and forgets it; host folders are the caller's.
	Remove(ctx context.Context, id string) error
	// Status reports the sandbox's state: StateRunning only while this
	// process runs it (booted or adopted it, and holds its agent).
	Status(ctx context.Context, id string) (Status, error)
	// Checkpoints reports whether the backend can checkpoint and restore
	// sandboxes on this host (their processes, memory, open files,
	// terminals and /tmp), and why not: a backend that cannot keeps files
	// only across a stop.
	Checkpoints(ctx context.Context) CheckpointSupport
	// Checkpoint saves the running state of sandbox id into dir (an
	// existing, empty host folder) and stops the sandbox; its files stay.
	// ErrUnsupported when Checkpoints says no. On an error the sandbox may
	// still run: the caller stops it.
	Checkpoint(ctx context.Context, id, dir string) error
	// CheckpointRunning saves the running state of sandbox id into dir
	// (an existing, empty host folder), as Checkpoint does, and leaves the
	// sandbox running: its processes pause while the state is written.
	// The loopback listeners made through Listen end, as they do at a
	// stop, and are made again by the caller. Restore boots a sandbox from
	// the folder later, in place of the one running then. ErrUnsupported
	// when Checkpoints says no.
	CheckpointRunning(ctx context.Context, id, dir string) error
	// Restore boots the sandbox of spec.ID from the checkpoint in dir, in
	// place of a fresh boot: its processes go on where Checkpoint saved
	// them, with spec.Mounts (the same targets) bound again. It wraps
	// ErrCheckpointIncompatible when this backend cannot restore that
	// checkpoint (another runtime build, root filesystem, agent or folder
	// layout, or a damaged one) and ErrUnsupported when Checkpoints says
	// no; the caller then boots the sandbox fresh (Ensure).
	Restore(ctx context.Context, spec Spec, dir string) error
	// Reconcile finds the sandboxes of this backend's instance that this
	// process does not run (left by an earlier process, or run by another)
	// and does with each what decide says. Backends whose sandboxes end
	// with the process find none.
	Reconcile(ctx context.Context, decide func(id string) Verdict) (adopted, removed []string, err error)
}
