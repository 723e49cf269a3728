// Package gvisor runs sandboxes in gVisor by driving runsc directly over
// an OCI bundle, with no container engine in between: one runsc sandbox
// per container over the sandbox image's root filesystem folder (the local
// backend's, read-only), with the container's folders bound in, no network
// but loopback, and the threadbox agent as its init speaking the agent
// protocol over the sandbox's stdin and stdout, pipes of this process.
// runsc makes a control group per sandbox for its memory, CPU and pids
// limits. A runsc process stays the sandbox's parent while it runs (it
// reaps the sandbox and removes its state when it ends), and sandboxes end
// with this process, as the local backend's jails do: their agent's input
// is this process's pipe.
//
// Because runsc is driven directly, a running sandbox can be saved into a
// folder and booted again from it, its processes going on where they were
// (checkpoint.go): by this process or a later one, with new pipes and a
// new runsc container id, as long as the runsc build, root filesystem,
// agent and folder targets are the same.
//
// A sandbox's folders are bound from a view of its own (view.go), so that
// a sandbox can also boot warm, before any container needs it, and be
// claimed by one whose folders are then bound into its view (pool.go).
package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/cgroupacct"
	"threadbox/infra/sandbox/hostdirs"
)

// AgentPath is where the agent binary appears inside the sandbox.
const AgentPath = "/opt/threadbox/agent"

// Defaults applied to zero fields of Config (sandbox.DefaultLimits fills
// the zero limits).
const (
	DefaultRunsc       = "runsc"
	DefaultStateDir    = "/run/threadbox-gvisor"
	DefaultCgroupRoot  = "/sys/fs/cgroup"
	DefaultBootTimeout = 30 * time.Second
)

// runscFlags are the global flags of every runsc call. A checkpoint
// restores only under the same ones, so they are part of its runtime's
// identity (checkpoint.go): no network but loopback, and no overlay over
// the read-only root filesystem (the default would keep one in memory, or
// in a file beside the shared root filesystem).
var runscFlags = []string{"--network=none", "--overlay2=none"}

// Config configures a Backend.
type Config struct {
	// Settings are what every backend takes: instance, limits, boot
	// timeout and logger.
	boxes.Settings

	// Runsc is the runsc binary; default DefaultRunsc looked up in PATH.
	Runsc string
	// RootFS is the host folder holding the sandbox image's root
	// filesystem, as the local backend's (local.FindRootFS). It is
	// resolved once (a symbolic link such as the build cache's "current"
	// to the folder of one build), and that folder names it in
	// checkpoints. Required.
	RootFS string
	// AgentBin is the host path of the static threadbox-agent binary. Required.
	AgentBin string
	// StateDir holds runsc's state and the sandboxes' bundles, under a
	// folder per Instance; default DefaultStateDir. This process's alone.
	StateDir string
	// PoolDir holds the sandboxes' views (view.go), warm or not, in a
	// folder per process; default the folder "<instance>-views" beside the
	// instance's in StateDir. Like StateDir, on the host: views are mounts.
	PoolDir string
	// Dirs, when set, prepares each container's host folders before boot;
	// a Spec without Mounts then gets Dirs' mounts.
	Dirs *hostdirs.Layout
	// DiskQuota tells that Dirs enforces a per-container disk quota.
	DiskQuota bool
	// CgroupRoot is where the control group hierarchies are mounted;
	// default DefaultCgroupRoot.
	CgroupRoot string
}

// Backend runs sandboxes under runsc. It implements sandbox.Backend.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	rootfs string // cfg.RootFS resolved
	state  string // runsc --root
	bndls  string // the bundles' parent folder
	views  string // the views' parent folder, this process's in PoolDir

	boxes           *boxes.Set[*box]
	boxes.Ops[*box] // Exec, Start, Listen, Status, SandboxCPU
	pool            *boxes.Pool[*box]

	availMu sync.Mutex
	availAt time.Time // last successful check

	versionOnce sync.Once
	version     string // `runsc --version`'s first line, with runscFlags
	versionErr  error

	digestMu  sync.Mutex
	digestKey string // the agent binary's size and modification time when digest was taken
	digest    string

	heldMu sync.Mutex
	held   map[string]*agent.Client // agent connections kept across a checkpoint, by container id

	wg sync.WaitGroup // the runsc processes' waiters

	self owner // the backend that makes its runsc containers (owner.go)

	readyMu   sync.Mutex
	ready     *readyBox // a container ready to restore into (ready.go)
	readyBusy bool      // one is being made
	closed    bool      // Close began: no more are made

	cidsMu   sync.Mutex
	cids     map[string]bool // the runsc containers of this backend not yet deleted
	deleting map[string]bool // those of cids being deleted after their sandbox ended
}

// box is one running sandbox.
type box struct {
	// The host process is runsc run (or restore), the sandbox's parent;
	// Done is closed when it has exited: the sandbox and its state are gone.
	boxes.Proc
	b        *Backend
	id, cid  string
	bundle   string
	view     string          // the view its folders are bound from
	mounts   []sandbox.Mount // the folders bound in, whose targets a checkpoint records
	stderr   *boxes.LogTail
	cpu      cgroupacct.CPU
	oomCount cgroupacct.OOM       // its memory cgroup's oom_kill counter
	oom      *cgroupacct.OOMWatch // its memory cgroup running out, as it happens
	procs    []string             // the cgroup.procs files its control group may have
	limits   sandbox.Limits       // its limits, as its control group enforces them
	restored bool                 // booted from a checkpoint
	// foster: its sandbox is not its runsc's child (runsc create made it,
	// runsc restore restored into it), so runsc learns of the sandbox's
	// end only once the host's init reaped it.
	foster bool
}

// New returns a gvisor backend. A missing runsc, root filesystem or agent
// binary is not an error here: Available reports it, so that the backend
// stays listed, unavailable with the reason, where SANDBOX_BACKEND names it.
func New(cfg Config) (*Backend, error) {
	if cfg.Runsc == "" {
		cfg.Runsc = DefaultRunsc
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = DefaultCgroupRoot
	}
	cfg.Defaults(DefaultBootTimeout)
	lg := cfg.Logger
	rootfs := boxes.ResolveRootFS(cfg.RootFS)
	dir := filepath.Join(cfg.StateDir, hostdirs.SafeID(cfg.Instance))
	if cfg.PoolDir == "" {
		// Beside the state folder, never in it: that one is removed whole.
		cfg.PoolDir = dir + "-views"
	}
	set := boxes.New[*box]("gvisor", lg)
	b := &Backend{cfg: cfg, log: lg, rootfs: rootfs, state: filepath.Join(dir, "state"), bndls: filepath.Join(dir, "bundles"), views: filepath.Join(cfg.PoolDir, strconv.Itoa(os.Getpid())),
		boxes: set, Ops: boxes.NewOps(set, nil), held: map[string]*agent.Client{}, self: newOwner(), cids: map[string]bool{}, deleting: map[string]bool{}}
	b.pool = boxes.NewPoolWith(set, b.views, viewLayout{rootfs: rootfs})
	return b, nil
}

// Name returns "gvisor".
func (b *Backend) Name() string { return "gvisor" }

// Isolation returns the isolation level of a gVisor sandbox.
func (b *Backend) Isolation() string { return "application kernel" }

// cgroupV2 reports whether the host mounts the unified hierarchy at CgroupRoot.
func (b *Backend) cgroupV2() bool {
	_, err := os.Stat(filepath.Join(b.cfg.CgroupRoot, "cgroup.controllers"))
	return err == nil
}

// EnforcedLimits names the limits every sandbox gets: memory, CPU and pids
// through the control group runsc makes for it, nofile as the agent's
// rlimit, /tmp's size, and disk where Dirs carries a quota.
func (b *Backend) EnforcedLimits(ctx context.Context) ([]string, string) {
	out := []string{"memory", "cpu", "pids", "nofile", "tmp"}
	if b.cfg.DiskQuota {
		out = append(out, "disk")
	}
	mech := "cgroup v1 (gVisor)"
	if b.cgroupV2() {
		mech = "cgroup v2 (gVisor)"
	}
	return out, mech
}

// runscVersion returns the runsc build with the flags this backend runs it
// with, asked once: a checkpoint restores only into the same.
func (b *Backend) runscVersion() (string, error) {
	b.versionOnce.Do(func() {
		bin, err := exec.LookPath(b.cfg.Runsc)
		if err != nil {
			b.versionErr = fmt.Errorf("runsc (install gVisor's runsc; scripts/ci-docker.sh does): %w", err)
			return
		}
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			b.versionErr = fmt.Errorf("runsc --version: %w", err)
			return
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		b.version = line + " " + strings.Join(runscFlags, " ") + " " + viewTargets
	})
	return b.version, b.versionErr
}

// Available checks runsc, root (runsc needs it to make sandboxes), the root
// filesystem and the agent binary. A success is remembered for a few
// seconds; the first boot proves the rest.
func (b *Backend) Available(ctx context.Context) error {
	b.availMu.Lock()
	defer b.availMu.Unlock()
	if !b.availAt.IsZero() && time.Since(b.availAt) < 10*time.Second {
		return nil
	}
	if _, err := b.runscVersion(); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("gvisor: runsc makes sandboxes as root only; threadbox runs as another user")
	}
	if err := boxes.CheckRootFS(b.rootfs); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	if err := boxes.CheckAgentBin(b.cfg.AgentBin); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	b.availAt = time.Now()
	return nil
}

// runsc returns a runsc command with the backend's state folder and flags.
func (b *Backend) runsc(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--root", b.state}, runscFlags...)
	return exec.CommandContext(ctx, b.cfg.Runsc, append(full, args...)...)
}

// runscOut runs a short runsc command and returns its output, or an error
// carrying it.
func (b *Backend) runscOut(ctx context.Context, args ...string) ([]byte, error) {
	out, err := b.runsc(ctx, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// limits fills the zero fields of l from the backend's defaults.
func (b *Backend) limits(l sandbox.Limits) sandbox.Limits { return l.Or(b.cfg.Limits) }

// Ensure boots the sandbox for spec.ID unless it is running. A sandbox that
// died is replaced by a fresh one over the same host folders.
func (b *Backend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if err := b.boxes.Ensure(ctx, spec, b.cfg.Dirs, func(ctx context.Context, spec sandbox.Spec) (*box, error) {
		// A fresh boot ends what a checkpoint of the sandbox kept.
		b.dropHeld(spec.ID)
		return b.start(ctx, spec, "", "", false)
	}); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	return nil
}

// newCID returns a runsc container id for container id, new at each boot:
// runsc keeps a container's state under its id until it is deleted.
func newCID(id string) string {
	return hostdirs.SafeID(id) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// start boots spec's sandbox under a new runsc container: fresh (runsc
// run), or from the checkpoint in image (runsc restore). Its folders are
// bound from view, a warm pool slot made for it, or else from a view of
// its own made here. Either way runsc runs in the foreground as the
// sandbox's parent and exits with it, and the view goes then.
//
// A restore with useReady goes into the ready container (ready.go) when
// one fits; an error of that attempt wraps errReadyFailed.
func (b *Backend) start(ctx context.Context, spec sandbox.Spec, image, view string, useReady bool) (*box, error) {
	if _, err := b.runscVersion(); err != nil {
		return nil, err
	}
	l := b.limits(spec.Limits)
	var ready *readyBox
	if useReady && image != "" && view == "" {
		ready = b.takeReady(spec.Mounts, l)
	}
	cid := newCID(spec.ID)
	if ready != nil {
		cid, view = ready.cid, ready.view
	} else {
		// Known before its view exists, so that no Reconcile takes the
		// view for a stray.
		b.cidsMu.Lock()
		b.cids[cid] = true
		b.cidsMu.Unlock()
	}
	forget := func() {
		if ready != nil {
			// runsc created the container: it goes.
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = b.runscOut(dctx, "delete", "--force", cid)
			cancel()
			_ = os.RemoveAll(ready.bundle)
		}
		b.cidsMu.Lock()
		delete(b.cids, cid)
		b.cidsMu.Unlock()
	}
	bx, err := b.startIn(ctx, spec, image, view, l, cid, ready, forget)
	if err != nil && ready != nil {
		return nil, fmt.Errorf("%w: %w", errReadyFailed, err)
	}
	return bx, err
}

// errReadyFailed marks an error of a restore into the ready container.
var errReadyFailed = errors.New("restore into the ready container failed")

// startIn is start with its runsc container id cid chosen: a new one, or
// the ready container's. forget undoes what start did before.
func (b *Backend) startIn(ctx context.Context, spec sandbox.Spec, image, view string, l sandbox.Limits, cid string, ready *readyBox, forget func()) (*box, error) {
	if view == "" {
		view = filepath.Join(b.views, "run-"+cid)
		if err := makeView(view, b.rootfs, spec.Mounts); err != nil {
			forget()
			return nil, err
		}
	}
	cgroupsPath := "/threadbox-gvisor/" + hostdirs.SafeID(b.cfg.Instance) + "/" + cid
	bx := &box{b: b, id: spec.ID, cid: cid, bundle: filepath.Join(b.bndls, cid), view: view, mounts: spec.Mounts, Proc: boxes.NewProc(),
		stderr: boxes.NewLogTail(b.log, "sandbox", spec.ID), procs: b.procsFiles(cgroupsPath), limits: l, restored: image != "", foster: ready != nil}
	err := bindView(view, spec.Mounts)
	if err == nil && ready == nil {
		err = writeBundle(bx.bundle, b.bundleSpec(spec, l, cgroupsPath, view))
	}
	if err != nil {
		if ready != nil {
			ready.close()
		}
		forget()
		b.removeView(view)
		return nil, err
	}
	args := []string{"run", "--bundle", bx.bundle, cid}
	switch {
	case ready != nil:
		// runsc restores into the container it created, with its bundle.
		args = []string{"restore", "--image-path", image, cid}
	case image != "":
		args = []string{"restore", "--image-path", image, "--bundle", bx.bundle, cid}
	}
	spawned := time.Now()
	conn, err := b.spawn(bx, args, ready)
	if err != nil {
		forget()
		_ = os.RemoveAll(bx.bundle)
		b.removeView(view)
		return nil, err
	}
	if image != "" {
		// The restored agent is held until told otherwise: its answer
		// (Released) is the handshake.
		rctx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
		if c := b.takeHeld(spec.ID); c != nil {
			// The agent connection of the checkpointed sandbox goes on over
			// the restored one's pipes: the sessions it started stay this
			// process's.
			bx.Client = c
			err = c.Resume(rctx, conn)
		} else {
			bx.Client = boxes.NewAgent(conn)
			err = bx.Client.Release(rctx)
		}
		cancel()
	} else {
		if c := b.takeHeld(spec.ID); c != nil {
			c.Close()
		}
		bx.Client = boxes.NewAgent(conn)
		err = boxes.Handshake(ctx, b.cfg.BootTimeout, bx.Client, bx.Done())
	}
	if err != nil {
		bx.Kill()
		<-bx.Done()
		return nil, fmt.Errorf("%w: %s", err, bx.stderr.Tail())
	}
	// From runsc's start to the agent's first answer: the part of a boot or
	// restore that is runsc's.
	took := time.Since(spawned)
	bx.Booted = time.Now()
	cpu, oom := cgroupacct.At(b.cfg.CgroupRoot, cgroupsPath)
	bx.cpu, bx.oomCount = cpu, oom
	if w, err := cgroupacct.WatchOOM(oom); err == nil {
		bx.oom = w
	} else {
		b.log.Warn("sandbox memory kills not watched", "id", spec.ID, "cause", err.Error())
	}
	what := "sandbox booted"
	if image != "" {
		what = "sandbox restored"
	}
	b.log.Info(what, "id", spec.ID, "backend", "gvisor", "container", cid, "runsc", took.String())
	return bx, nil
}

// spawn starts runsc with args, the sandbox's stdio on pipes of this
// process, and returns the agent's connection. A goroutine waits for
// runsc, removes the bundle and closes bx.Done.
func (b *Backend) spawn(bx *box, args []string, ready *readyBox) (io.ReadWriteCloser, error) {
	// runsc dies with this process, and the sandbox with its agent's input.
	// It is known (start) before it starts, so that Close finds it however
	// soon it ends.
	cmd := b.runsc(context.Background(), args...)
	var theirs []*os.File
	var out *os.File
	var conn io.ReadWriteCloser
	if ready != nil {
		// The ready container's sandbox has the agent's pipes since its
		// creation; runsc restore's own output goes to the log.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("pipe: %w", err)
		}
		cmd.Stdout, cmd.Stderr = w, w
		theirs, out, conn = []*os.File{w}, r, ready.conn
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			_, _ = io.Copy(bx.stderr, ready.errR)
			ready.errR.Close()
		}()
	} else {
		p, err := newPipes()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW
		theirs, out = []*os.File{p.inR, p.outW, p.errW}, p.errR
		conn = agent.NewConn(p.outR, p.inW, func() error {
			p.inW.Close()
			return p.outR.Close()
		})
	}
	err := bx.Start(cmd, theirs, out, bx.stderr, &b.wg, func() {
		bx.oom.Close()
		// runsc leaves the state (and control group) of a container it
		// killed, checkpointed or restored: it goes with its process. The
		// sandbox is gone once runsc exited by itself and its control
		// group holds no process (the sandbox's and its file server's
		// exits are over: they hold no folder of the view any more). Then
		// the view goes and Done is closed at once, and runsc deletes the
		// container after: it waits until the host's init has reaped the
		// file server, which a restoring runsc leaves to it (over a second
		// where init reaps slowly). Otherwise the container is deleted
		// first, which ends what is left of the sandbox.
		wait := sandboxExitWait
		if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
			// runsc was killed: by awaitEnd once the sandbox ended, or
			// because it did not end.
			wait = 0
		}
		gone := cgroupEmpty(bx.procs, wait)
		if !gone {
			b.deleteContainer(bx)
		}
		_ = os.RemoveAll(bx.bundle)
		b.removeView(bx.view)
		if gone {
			b.cidsMu.Lock()
			b.deleting[bx.cid] = true
			b.cidsMu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.deleteContainer(bx)
			}()
		}
	})
	if err != nil {
		conn.Close()
		out.Close()
		return nil, fmt.Errorf("start runsc: %w", err)
	}
	return conn, nil
}

// pipes are a sandbox's stdin, stdout and stderr: this process writes
// inW and reads outR and errR; the others are the sandbox's.
type pipes struct{ inR, inW, outR, outW, errR, errW *os.File }

// newPipes makes a sandbox's pipes.
func newPipes() (*pipes, error) {
	var p pipes
	var err error
	if p.inR, p.inW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.inR.Close()
		p.inW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.inR.Close()
		p.inW.Close()
		p.outR.Close()
		p.outW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	return &p, nil
}

// closeTheirs closes the sandbox's ends, once it has them.
func (p *pipes) closeTheirs() {
	p.inR.Close()
	p.outW.Close()
	p.errW.Close()
}

// sandboxExitWait bounds the wait, once runsc exited, for the sandbox's
// processes to leave its control group.
const sandboxExitWait = 2 * time.Second

// killGrace is how long Kill lets runsc exit by itself when runsc kill
// could not reach the sandbox.
const killGrace = time.Second

// deleteContainer deletes the runsc container of bx (its state and control
// group, and whatever of its sandbox is left) and forgets it.
func (b *Backend) deleteContainer(bx *box) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.runscOut(ctx, "delete", "--force", bx.cid); err != nil && !strings.Contains(err.Error(), "does not exist") {
		b.log.Warn("runsc container not deleted", "id", bx.id, "container", bx.cid, "cause", err.Error())
	}
	b.cidsMu.Lock()
	delete(b.cids, bx.cid)
	delete(b.deleting, bx.cid)
	b.cidsMu.Unlock()
}

// procsFiles returns the cgroup.procs files the control group cgroupsPath
// has under the backend's cgroup root: the memory hierarchy's (cgroup v1)
// or the unified one's.
func (b *Backend) procsFiles(cgroupsPath string) []string {
	out := []string{filepath.Join(b.cfg.CgroupRoot, "memory", cgroupsPath, "cgroup.procs")}
	for _, dir := range cgroupacct.V2Dirs(b.cfg.CgroupRoot, cgroupsPath) {
		out = append(out, filepath.Join(dir, "cgroup.procs"))
	}
	return out
}

// cgroupEmpty waits up to max for every existing file of procs to list no
// process, and reports whether they came to; a process that exited leaves
// its control group before its parent reaps it.
func cgroupEmpty(procs []string, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for {
		empty := true
		for _, p := range procs {
			if data, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(data)) != "" {
				empty = false
				break
			}
		}
		if empty {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Kill ends the sandbox: its agent connection, then the sandbox through
// runsc. The runsc process exits once the sandbox is gone (Done).
func (bx *box) Kill() {
	bx.Client.Close()
	if !bx.Running() {
		return
	}
	// runsc kill ends the sandbox within tens of milliseconds. It cannot
	// reach a sandbox already ending (its agent ends when its input
	// closes, above), whose runsc then exits by itself; killed instead,
	// runsc would leave the sandbox's end to its deletion. The process
	// group goes when runsc does not exit (its state gone, the sandbox
	// hung).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := bx.b.runscOut(ctx, "kill", bx.cid, "KILL")
	switch {
	case bx.foster:
		bx.awaitEnd(context.Background())
	case err != nil:
		select {
		case <-bx.Done():
		case <-time.After(killGrace):
			bx.KillGroup()
		}
	}
}

// awaitEnd waits for the runsc process of a sandbox that is ending to
// exit, or for ctx to end. A foster sandbox's runsc would wait for the
// host's init to reap the sandbox: once its control group lists no
// process it has nothing left to do, and is killed.
func (bx *box) awaitEnd(ctx context.Context) {
	if bx.foster {
		// Ended or not (then the exit handler deletes the container,
		// which ends the sandbox), its runsc goes.
		cgroupEmpty(bx.procs, sandboxExitWait)
		bx.KillGroup()
	}
	select {
	case <-bx.Done():
	case <-ctx.Done():
	}
}

// OOMKills reads its memory control group's kill counter. The host's
// kernel kills the biggest process of the group when it runs out of
// memory: with gVisor's systrap platform, the host process that holds the
// command's memory.
func (bx *box) OOMKills() (int64, bool) { return bx.oomCount.Read() }

// Why says out of memory when the sandbox's control group killed for it.
func (bx *box) Why() string {
	if bx.oom.Killed() {
		return "out of memory (the sandbox's memory limit was reached and the kernel killed it)"
	}
	return ""
}

// Stop ends the sandbox id; its files stay. A warm sandbox is never used
// again once it stops: its slot goes, even when it ended by itself.
func (b *Backend) Stop(ctx context.Context, id string) error {
	defer b.boxes.Lock(id)()
	defer b.pool.Drop(id)
	return b.boxes.Stop(ctx, id)
}

// Remove stops the sandbox and forgets it, with any agent connection a
// checkpoint kept. Host folders and checkpoints are the caller's.
func (b *Backend) Remove(ctx context.Context, id string) error {
	return b.boxes.Remove(ctx, id, func(ctx context.Context, id string) error {
		if err := b.Stop(ctx, id); err != nil {
			return err
		}
		b.dropHeld(id)
		return nil
	})
}

// CPUTime reads the sandbox's control group: the application kernel and
// every process it serves.
func (bx *box) CPUTime(context.Context) (time.Duration, error) {
	d, ok := bx.cpu.Read()
	if !ok {
		return 0, boxes.ErrCPUNotCounted
	}
	return d, nil
}

// listed is one container of `runsc list --format=json`.
type listed struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Annotations map[string]string `json:"annotations"`
}

// list returns the runsc containers of this backend's state folder.
func (b *Backend) list(ctx context.Context) ([]listed, error) {
	if _, err := os.Stat(b.state); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := b.runsc(ctx, "list", "--format=json").Output()
	if err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	var all []listed
	if err := json.Unmarshal(out, &all); err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	return all, nil
}

// Reconcile removes the runsc containers of this instance that no live
// backend owns. A sandbox's agent speaks over the pipes of the process
// that booted it, so none can be adopted. A container this backend made
// and has not deleted yet (booting, warm, running, or being deleted after
// its end) stays, and so does one another live backend made
// (annotationOwner: another server of the instance on this host, or
// another backend of this process), whatever runsc says of it: one being
// created or taken down does not run yet or any more. The containers of
// makers that ended are removed, except one still running whose
// container another live process holds (decide says Leave), as for a
// container made before owners were recorded.
func (b *Backend) Reconcile(ctx context.Context, decide func(id string) sandbox.Verdict) (adopted, removed []string, err error) {
	all, err := b.list(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: reconcile: %w", err)
	}
	mine := map[string]bool{}
	for _, id := range b.boxes.IDs(nil) {
		if bx := b.boxes.Get(id); bx != nil {
			mine[bx.cid] = true
		}
	}
	b.cidsMu.Lock()
	for cid := range b.cids {
		mine[cid] = true
	}
	b.cidsMu.Unlock()
	for _, c := range all {
		if mine[c.ID] {
			continue
		}
		if o, ok := parseOwner(c.Annotations[annotationOwner]); ok && o != b.self && o.alive() {
			continue
		}
		id := c.Annotations[annotationContainer]
		if c.Status == "running" && id != "" && decide(id) == sandbox.Leave {
			continue
		}
		if _, err := b.runscOut(ctx, "delete", "--force", c.ID); err != nil {
			if !strings.Contains(err.Error(), "does not exist") {
				b.log.Warn("stale gVisor sandbox not removed", "container", c.ID, "cause", err.Error())
			}
			continue
		}
		_ = os.RemoveAll(filepath.Join(b.bndls, c.ID))
		if id != "" {
			removed = append(removed, id)
		}
	}
	b.removeStrayViews()
	return nil, removed, nil
}

// Close ends every sandbox of this backend, forgets the agent connections
// checkpoints kept, waits for its runsc processes, and removes the state
// folder when no container of the instance is left in it.
func (b *Backend) Close() error {
	b.closeReady()
	errs := []error{b.boxes.StopAll(b.Stop)}
	b.heldMu.Lock()
	for id, c := range b.held {
		c.Close()
		delete(b.held, id)
	}
	b.heldMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// What is left of this backend's own containers (another server of
	// the same instance on this host keeps its own).
	b.cidsMu.Lock()
	left := make([]string, 0, len(b.cids))
	for cid := range b.cids {
		if !b.deleting[cid] {
			left = append(left, cid)
		}
	}
	b.cidsMu.Unlock()
	for _, cid := range left {
		if _, err := b.runscOut(ctx, "delete", "--force", cid); err != nil && !strings.Contains(err.Error(), "does not exist") {
			errs = append(errs, err)
		}
	}
	b.wg.Wait()
	// The slots of warm sandboxes that ended by themselves, and any view
	// left (every sandbox of this backend has ended).
	for _, id := range b.pool.IDs() {
		b.pool.Drop(id)
	}
	b.removeStrayViews()
	_ = os.Remove(b.views)
	_ = os.Remove(b.cfg.PoolDir)
	if all, err := b.list(ctx); err == nil && len(all) == 0 {
		// runsc keeps a few files of its own beside its containers' state.
		_ = os.RemoveAll(filepath.Dir(b.state))
	}
	b.removeCgroupParents()
	return errors.Join(errs...)
}

// removeCgroupParents deletes the (then empty) control group folders runsc
// made above the sandboxes' own: /threadbox-gvisor/<instance> in each
// hierarchy, and /threadbox-gvisor when no other instance is left.
func (b *Backend) removeCgroupParents() {
	roots := []string{b.cfg.CgroupRoot}
	if !b.cgroupV2() {
		entries, _ := os.ReadDir(b.cfg.CgroupRoot)
		roots = roots[:0]
		for _, e := range entries {
			if e.IsDir() {
				roots = append(roots, filepath.Join(b.cfg.CgroupRoot, e.Name()))
			}
		}
	}
	for _, r := range roots {
		_ = os.Remove(filepath.Join(r, "threadbox-gvisor", hostdirs.SafeID(b.cfg.Instance)))
		_ = os.Remove(filepath.Join(r, "threadbox-gvisor"))
	}
}

var _ sandbox.Backend = (*Backend)(nil)

// RemoveInstance deletes every runsc container of instance on this host
// (under DefaultStateDir), then its state folder and control group
// folders. threadbox's sandboxes end with it, but one killed at once
// leaves their state for the next start's Reconcile; this is for servers
// that must leave nothing behind, such as those of tests.
func RemoveInstance(ctx context.Context, instance string) error {
	b, err := New(Config{Settings: boxes.Settings{Instance: instance}})
	if err != nil {
		return err
	}
	all, err := b.list(ctx)
	if err != nil {
		return fmt.Errorf("gvisor: remove instance %s: %w", instance, err)
	}
	var errs []error
	for _, c := range all {
		if _, err := b.runscOut(ctx, "delete", "--force", c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Dir(b.state)); err != nil {
		errs = append(errs, err)
	}
	// Every process's views: their sandboxes are gone.
	procs, _ := os.ReadDir(b.cfg.PoolDir)
	for _, p := range procs {
		b.removeView(filepath.Join(b.cfg.PoolDir, p.Name()))
	}
	_ = os.Remove(b.cfg.PoolDir)
	b.removeCgroupParents()
	return errors.Join(errs...)
}
