// Package gvisor runs sandboxes in gVisor by driving runsc directly over
// an OCI bundle, with no container engine in between: one runsc sandbox
// per container over the sandbox image's root filesystem folder (the local
// backend's, read-only), with the container's folders bound in, no network
// but loopback, and the threadbox agent as its init speaking the agent
// protocol over the sandbox's stdin and stdout. runsc makes a control
// group per sandbox for its memory, CPU and pids limits. The agent's pipes
// are held by a relay on the host (relay.go), which reaps the sandbox and
// passes frames between it and one threadbox process at a time: a sandbox
// outlives a threadbox process killed at once, and the next one adopts it.
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
	"bytes"
	"cmp"
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
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/cgroupacct"
	"threadbox/infra/sandbox/hostdirs"
)

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

	boxes             *boxes.Set[*box]
	boxes.Ops[*box]   // Exec, Start, Listen, Status, SandboxCPU
	boxes.Saves[*box] // Checkpoint, CheckpointRunning (checkpoint.go)
	pool              *boxes.Pool[*box]
	ooms              cgroupacct.OOMWatcher // the sandboxes' memory kills, as they happen

	availMu sync.Mutex
	availAt time.Time // last successful check

	versionOnce sync.Once
	version     string // `runsc --version`'s first line, with runscFlags
	versionErr  error

	digest boxes.AgentDigest // the agent binary's, which checkpoints record

	held boxes.HeldClients // agent connections kept across a checkpoint, by container id

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
	oomCount cgroupacct.OOM // its memory cgroup's oom_kill counter
	// oom is its memory cgroup running out, as it happens: made once the
	// agent answered, while the watcher of its end (watch) already runs.
	oom      cgroupacct.OOMSlot
	procs    []string       // the cgroup.procs files its control group may have
	limits   sandbox.Limits // its limits, as its control group enforces them
	restored bool           // booted from a checkpoint
	relay    *relayProc     // the relay holding its agent's stdio (relay.go)
}

// New returns a gvisor backend. A missing runsc, root filesystem or agent
// binary is not an error here: Available reports it, so that the backend
// stays listed, unavailable with the reason, where SANDBOX_BACKEND names it.
func New(cfg Config) (*Backend, error) {
	cfg.Runsc = cmp.Or(cfg.Runsc, DefaultRunsc)
	cfg.StateDir = cmp.Or(cfg.StateDir, DefaultStateDir)
	cfg.CgroupRoot = cmp.Or(cfg.CgroupRoot, DefaultCgroupRoot)
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
		boxes: set, Ops: boxes.NewOps(set, nil), self: newOwner(), cids: map[string]bool{}, deleting: map[string]bool{}}
	b.Saves = boxes.NewSaves(set, b.Checkpoints, b.save)
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
		b.held.Drop(spec.ID)
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
// its own made here. Either way runsc leaves the sandbox running under
// its relay (relay.go), and the view goes when the sandbox does.
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
			// runsc created the container: it goes, and its relay with it.
			b.dropReady(ready)
			return
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

// cgroupsPath is the control group path of the runsc container cid.
func (b *Backend) cgroupsPath(cid string) string {
	return "/threadbox-gvisor/" + hostdirs.SafeID(b.cfg.Instance) + "/" + cid
}

// newBox returns the box of sandbox id in the runsc container cid.
func (b *Backend) newBox(id, cid, view string, mounts []sandbox.Mount, l sandbox.Limits, restored bool) *box {
	return &box{b: b, id: id, cid: cid, bundle: filepath.Join(b.bndls, cid), view: view, mounts: mounts, Proc: boxes.NewProc(),
		stderr: boxes.NewLogTail(b.log, "sandbox", id), procs: b.procsFiles(b.cgroupsPath(cid)), limits: l, restored: restored}
}

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
	bx := b.newBox(spec.ID, cid, view, spec.Mounts, l, image != "")
	// fail undoes what startIn made, for a failure before the sandbox runs.
	fail := func(err error) (*box, error) {
		forget()
		_ = os.RemoveAll(bx.bundle)
		b.removeView(view)
		return nil, err
	}
	err := bindView(view, spec.Mounts)
	if err == nil && ready == nil {
		err = writeBundle(bx.bundle, b.bundleSpec(spec, l, b.cgroupsPath(cid), view))
	}
	if err != nil {
		return fail(err)
	}
	spawned := time.Now()
	// A runsc restore into the ready container runs beside the agent's
	// release; if it fails, so does the release, at once.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, restoreErr, err := b.launch(cctx, cancel, bx, image, ready)
	if err == nil {
		err = writeRecord(bx)
		if err != nil {
			conn.Close()
			b.endLaunched(bx)
		}
	}
	if err != nil {
		return fail(err)
	}
	b.watch(bx)
	if err := b.connect(cctx, bx, conn, image != ""); err != nil {
		if rerr := restoreErr(); rerr != nil {
			err = rerr
		}
		bx.Kill()
		<-bx.Done()
		return nil, fmt.Errorf("%w: %s", err, bx.stderr.Tail())
	}
	// From runsc's start to the agent's first answer: the part of a boot or
	// restore that is runsc's.
	took := time.Since(spawned)
	what := "sandbox booted"
	if image != "" {
		what = "sandbox restored"
	}
	b.log.Info(what, "id", spec.ID, "container", cid, "runsc", took.String())
	return bx, nil
}

// launch has runsc run the sandbox of bx (or restore it from image) under
// a relay, or restores it into the ready container, whose relay runs
// already, and returns the connection to the relay. A restore into the
// ready container goes on in the background: restoreErr says how it
// failed, once it did, and cancel is called then.
func (b *Backend) launch(ctx context.Context, cancel context.CancelFunc, bx *box, image string, ready *readyBox) (conn io.ReadWriteCloser, restoreErr func() error, err error) {
	none := func() error { return nil }
	if ready != nil {
		bx.relay = ready.relay
		var out bytes.Buffer
		cmd := b.runsc(context.WithoutCancel(ctx), "restore", "--detach", "--image-path", image, bx.cid)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("runsc restore: %w", err)
		}
		var mu sync.Mutex
		var failed error
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			if err := cmd.Wait(); err != nil {
				mu.Lock()
				failed = fmt.Errorf("runsc restore: %w: %s", err, strings.TrimSpace(out.String()))
				mu.Unlock()
				cancel()
			}
		}()
		return ready.conn, func() error {
			mu.Lock()
			defer mu.Unlock()
			return failed
		}, nil
	}
	args := []string{"run", "--detach", "--bundle", bx.bundle, bx.cid}
	if image != "" {
		args = []string{"restore", "--detach", "--image-path", image, "--bundle", bx.bundle, bx.cid}
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.BootTimeout)
	defer scancel()
	rp, err := b.startRelay(sctx, bx.bundle, false, args)
	if err != nil {
		// What runsc made of the container goes.
		b.deleteContainer(bx)
		return nil, nil, err
	}
	bx.relay = rp
	c, err := dialRelay(sctx, bx.bundle)
	if err != nil {
		// Gone already: runsc failed, and said why in the sandbox's log.
		err = fmt.Errorf("%w: %s", err, logTail(filepath.Join(bx.bundle, relayLog)))
		b.endLaunched(bx)
		return nil, nil, err
	}
	return c, none, nil
}

// endLaunched ends a sandbox that runs under its relay but was not kept:
// its container is deleted, and its relay exits.
func (b *Backend) endLaunched(bx *box) {
	b.deleteContainer(bx)
	bx.relay.kill()
	bx.relay.wait()
}

// connect makes the agent client of bx over conn, the connection to its
// relay: the client a checkpoint of the sandbox kept, resumed over it, or
// a new one. A restored or adopted agent (held) waits for a Release,
// whose answer names the sessions it kept; a fresh one answers a ping.
func (b *Backend) connect(ctx context.Context, bx *box, conn io.ReadWriteCloser, held bool) error {
	var err error
	if held {
		rctx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
		if c := b.held.Take(bx.id); c != nil {
			// The agent connection of the checkpointed sandbox goes on over
			// the restored one's relay: the sessions it started stay this
			// process's.
			bx.Client = c
			err = c.Resume(rctx, conn)
		} else {
			bx.Client = boxes.NewAgent(conn)
			err = bx.Client.Release(rctx)
		}
		cancel()
	} else {
		if c := b.held.Take(bx.id); c != nil {
			c.Close()
		}
		bx.Client = boxes.NewAgent(conn)
		err = boxes.Handshake(ctx, b.cfg.BootTimeout, bx.Client, bx.Done())
	}
	if err != nil {
		return err
	}
	bx.Booted = time.Now()
	cpu, oom := cgroupacct.At(b.cfg.CgroupRoot, b.cgroupsPath(bx.cid))
	bx.cpu, bx.oomCount = cpu, oom
	if w, err := b.ooms.Watch(oom); err == nil {
		bx.oom.Set(w)
	} else {
		b.log.Warn("sandbox memory kills not watched", "id", bx.id, "cause", err.Error())
	}
	return nil
}

// watch waits in the background for the relay of bx to exit (its sandbox
// ended), then removes what is left of the sandbox and closes Done.
func (b *Backend) watch(bx *box) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		bx.relay.wait()
		bx.oom.End()
		if data, err := os.ReadFile(filepath.Join(bx.bundle, relayLog)); err == nil {
			_, _ = bx.stderr.Write(data)
		}
		// The sandbox is gone once its relay exited (it reaped the
		// sandbox's processes) and its control group holds no process (its
		// file server holds no folder of the view any more). Then the view
		// goes and Done is closed at once, and the container is deleted
		// after. Otherwise (the relay was killed) the container is deleted
		// first, which ends what is left of the sandbox.
		gone := cgroupEmpty(bx.procs, sandboxExitWait)
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
		bx.Exited()
	}()
}

// Running reports whether the sandbox runs: its relay has not exited.
func (bx *box) Running() bool {
	if bx.relay == nil {
		return false
	}
	select {
	case <-bx.Done():
		return false
	default:
		return true
	}
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
// runsc. Its relay exits once the sandbox is gone (Done).
func (bx *box) Kill() {
	if bx.Client != nil {
		bx.Client.Close()
	}
	if !bx.Running() {
		return
	}
	// runsc kill ends the sandbox within tens of milliseconds. When it
	// cannot reach the sandbox (ending already, or hung), the relay goes:
	// the agent's input closes, and a sandbox still there when the relay
	// is gone is deleted (watch).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := bx.b.runscOut(ctx, "kill", bx.cid, "KILL"); err != nil {
		select {
		case <-bx.Done():
		case <-time.After(killGrace):
			bx.relay.kill()
		}
	}
}

// awaitEnd waits for a sandbox that is ending to be gone, or for ctx to
// end.
func (bx *box) awaitEnd(ctx context.Context) {
	select {
	case <-bx.Done():
	case <-ctx.Done():
	}
}

// OOMKills reads its memory control group's kill counter. The host's
// kernel kills the biggest process of the group when it runs out of
// memory: with gVisor's systrap platform, the host process that holds the
// command's memory. Once the group went with the sandbox, it returns
// what the group's watch counted until then.
func (bx *box) OOMKills() (int64, bool) { return bx.oom.Kills(bx.oomCount) }

// Why says nothing more than OOMKills tells: runsc leaves no reason.
func (bx *box) Why() string { return "" }

// Stop ends the sandbox id; its files stay. A warm sandbox is never used
// again once it stops: its slot goes, even when it ended by itself.
func (b *Backend) Stop(ctx context.Context, id string) error {
	return b.pool.Stop(ctx, id)
}

// Remove stops the sandbox and forgets it, with any agent connection a
// checkpoint kept. Host folders and checkpoints are the caller's.
func (b *Backend) Remove(ctx context.Context, id string) error {
	return b.boxes.Remove(ctx, id, func(ctx context.Context, id string) error {
		if err := b.Stop(ctx, id); err != nil {
			return err
		}
		b.held.Drop(id)
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

// Reconcile adopts or removes the runsc containers of this instance that
// no live backend owns. A container this backend made and has not deleted
// yet (booting, warm, running, or being deleted after its end) stays, and
// so does one another live backend made (annotationOwner: another server
// of the instance on this host, or another backend of this process),
// whatever runsc says of it: one being created or taken down does not run
// yet or any more. Of the containers whose makers ended, a running one is
// left when another live process holds its sandbox (decide says Leave), as
// for a container made before owners were recorded, and adopted when
// decide says Adopt and its relay still runs (relay.go): its agent's
// sessions are this process's from then on. The others are removed.
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
		id := c.Annotations[annotationContainer]
		if r, err := b.readRecord(c.ID); err == nil {
			// A claimed warm sandbox serves another id than its slot's.
			id = r.ID
		}
		if mine[c.ID] {
			// One this backend adopts meanwhile, or adopted, is adopted
			// for a caller that asks for it too.
			if id != "" && c.Status == "running" && decide(id) == sandbox.Adopt && b.adopt(ctx, c.ID, id) == nil {
				adopted = append(adopted, id)
			}
			continue
		}
		if o, ok := parseOwner(c.Annotations[annotationOwner]); ok && o != b.self && o.alive() {
			continue
		}
		if c.Status == "running" && id != "" {
			switch decide(id) {
			case sandbox.Leave:
				continue
			case sandbox.Adopt:
				if err := b.adopt(ctx, c.ID, id); err == nil {
					b.log.Info("sandbox adopted", "id", id, "container", c.ID)
					adopted = append(adopted, id)
					continue
				} else {
					b.log.Warn("sandbox not adopted", "id", id, "container", c.ID, "cause", err.Error())
				}
			}
		}
		if _, err := b.runscOut(ctx, "delete", "--force", c.ID); err != nil {
			if !strings.Contains(err.Error(), "does not exist") {
				b.log.Warn("stale gVisor sandbox not removed", "container", c.ID, "cause", err.Error())
			}
			continue
		}
		b.killRelayOf(c.ID)
		_ = os.RemoveAll(filepath.Join(b.bndls, c.ID))
		if id != "" {
			removed = append(removed, id)
		}
	}
	b.removeStrayViews()
	return adopted, removed, nil
}

// killRelayOf ends the relay of the container cid, whose sandbox is gone,
// if it still runs.
func (b *Backend) killRelayOf(cid string) {
	if r, err := b.readRecord(cid); err == nil {
		(&relayProc{pid: r.RelayPID, start: r.RelayStart}).kill()
	}
}

// Close ends every sandbox of this backend, forgets the agent connections
// checkpoints kept, waits for its runsc processes, and removes the state
// folder when no container of the instance is left in it.
func (b *Backend) Close() error {
	b.closeReady()
	errs := []error{b.boxes.StopAll(b.Stop)}
	b.ooms.Close()
	b.held.DropAll()
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
	b.removeGroups(left)
	if all, err := b.list(ctx); err == nil && len(all) == 0 {
		// runsc keeps a few files of its own beside its containers' state.
		_ = os.RemoveAll(filepath.Dir(b.state))
	}
	b.removeCgroupParents(false)
	return errors.Join(errs...)
}

// removeCgroupParents deletes the (then empty) control group folders runsc
// made above the sandboxes' own: /threadbox-gvisor/<instance> in each
// hierarchy, and /threadbox-gvisor when no other instance is left. With
// strays, it first deletes the empty groups left below the instance's
// folder, for when every container of the instance is gone: runsc leaves
// the group of a container made ahead of a restore (created, never
// started) when its server was killed before deleting it.
func (b *Backend) removeCgroupParents(strays bool) {
	for _, r := range b.cgroupRoots() {
		dir := filepath.Join(r, "threadbox-gvisor", hostdirs.SafeID(b.cfg.Instance))
		if strays {
			groups, _ := os.ReadDir(dir)
			for _, g := range groups {
				if g.IsDir() {
					_ = os.Remove(filepath.Join(dir, g.Name())) // a group with processes stays
				}
			}
		}
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Join(r, "threadbox-gvisor"))
	}
}

// removeGroups deletes the control groups of the containers cids where
// runsc left them; a group with processes stays.
func (b *Backend) removeGroups(cids []string) {
	for _, r := range b.cgroupRoots() {
		for _, cid := range cids {
			_ = os.Remove(filepath.Join(r, b.cgroupsPath(cid)))
		}
	}
}

// cgroupRoots returns the roots of the hierarchies runsc makes the
// sandboxes' groups in: the cgroup v2 mount, or each v1 controller's.
func (b *Backend) cgroupRoots() []string {
	if b.cgroupV2() {
		return []string{b.cfg.CgroupRoot}
	}
	entries, _ := os.ReadDir(b.cfg.CgroupRoot)
	var roots []string
	for _, e := range entries {
		if e.IsDir() {
			roots = append(roots, filepath.Join(b.cfg.CgroupRoot, e.Name()))
		}
	}
	return roots
}

var _ sandbox.Backend = (*Backend)(nil)

// RemoveInstance deletes every runsc container of instance on this host
// (under DefaultStateDir), then its state folder and control group
// folders, and stops their relays. threadbox ends its sandboxes when it
// stops, but one killed at once leaves them for the next start to adopt;
// this is for servers that must leave nothing behind, such as those of
// tests.
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
		b.killRelayOf(c.ID)
	}
	stopRelaysUnder(b.bndls)
	if err := os.RemoveAll(filepath.Dir(b.state)); err != nil {
		errs = append(errs, err)
	}
	// Every process's views: their sandboxes are gone.
	procs, _ := os.ReadDir(b.cfg.PoolDir)
	for _, p := range procs {
		b.removeView(filepath.Join(b.cfg.PoolDir, p.Name()))
	}
	_ = os.Remove(b.cfg.PoolDir)
	b.removeCgroupParents(true)
	return errors.Join(errs...)
}
