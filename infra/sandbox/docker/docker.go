// Package docker runs sandboxes as Docker containers through the Engine API.
// Each sandbox is one container whose init process is the threadbox agent
// (bind-mounted read-only from the host); commands travel through the agent
// protocol, never through `docker exec`: over a unix socket the agent dials
// (Config.SocketDir, runc) or else over the container's attached stdio. Containers carry the labels threadbox.managed=true,
// threadbox.instance and threadbox.container so Reconcile only ever touches
// its own.
package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/cgroupacct"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

// Labels put on every container this backend creates.
const (
	LabelManaged   = "threadbox.managed"
	LabelInstance  = "threadbox.instance"
	LabelContainer = "threadbox.container"
	// LabelWarm marks a sandbox booted for the warm pool (Warm); its
	// LabelContainer is the slot's name, even once claimed.
	LabelWarm = "threadbox.warm"
)

// Defaults applied to zero fields of Config (sandbox.DefaultLimits fills
// the zero limits).
const (
	DefaultImage       = "threadbox-sandbox:latest"
	DefaultRuntime     = "runc"
	DefaultBootTimeout = 30 * time.Second
)

// Config configures a Backend.
type Config struct {
	// Settings are what every backend takes: instance, limits, boot
	// timeout and logger.
	boxes.Settings

	// Image is the sandbox image; default DefaultImage.
	Image string
	// Runtime is the OCI runtime ("runc", or "runsc" for gVisor).
	Runtime string
	// AgentBin is the host path of the static threadbox-agent binary.
	AgentBin string
	// SocketDir, when set, is a host folder for the agents' unix sockets:
	// with the runc runtime each sandbox's agent dials a socket in its own
	// subfolder (mounted read-only at SocketMount) and the protocol skips the
	// daemon's attach stream, which then carries only the agent's log. The
	// subfolder also holds the sandbox's /etc/hosts, which lets its
	// container be created with networking disabled (a network namespace
	// of its own with only loopback, as with the network "none", at half
	// the start's cost). It must be a path the daemon can bind-mount (like
	// Dirs' folders).
	SocketDir string
	// Dirs, when set, prepares each container's host folders (and disk
	// quota) before boot; a Spec without Mounts then gets Dirs' mounts.
	Dirs *hostdirs.Layout
	// DiskQuota tells that the host folders carry a disk quota (for the
	// capability matrix).
	DiskQuota bool
	// PoolDir, when set, is a host folder for the warm sandboxes' slots
	// (infra/sandbox/slot): with the runc runtime and root, Warm boots
	// sandboxes whose folders Claim binds later. It must be a path the
	// daemon can bind-mount, and this process's alone (Warm clears what an
	// earlier process left there).
	PoolDir string
}

// Backend runs sandboxes as Docker containers. It implements sandbox.Backend.
type Backend struct {
	cli  *client.Client
	info Info
	cfg  Config
	log  *slog.Logger

	boxes           *boxes.Set[*box]
	boxes.Ops[*box]                       // Start, Listen, SandboxCPU
	ooms            cgroupacct.OOMWatcher // the sandboxes' memory kills, as they happen

	pool    *boxes.Pool[*box]
	renames sync.WaitGroup // claimed sandboxes' containers being renamed (Claim)
	criu    criuProbe      // what `criu check` said on this host (Checkpoints)
}

// box is one running sandbox and its agent connection.
type box struct {
	b         *Backend
	id        string
	name      string
	dockerID  string
	agent     boxes.Agent
	conn      io.Closer     // the agent connection and the attach stream
	done      chan struct{} // closed when the attach stream ends
	startedAt time.Time
	oom       cgroupacct.OOM
	cpu       cgroupacct.CPU
	oomReady  chan struct{} // closed once oom and cpu are known (or unknowable)
	// oomWatch is its memory cgroup running out, as it happens: the
	// group's counter goes with the container (OOMKills).
	oomWatch cgroupacct.OOMSlot
	renamed  chan struct{} // closed once a claim's rename is done; nil if none was started

	mu       sync.Mutex
	lastUsed time.Time
	active   int
}

// New connects to the daemon named by the environment (DOCKER_HOST, ...),
// negotiating the API version.
func New(cfg Config) (*Backend, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: client: %w", err)
	}
	return NewWithClient(cli, cfg), nil
}

// NewWithClient uses an existing Engine API client.
func NewWithClient(cli *client.Client, cfg Config) *Backend {
	cfg.Image = cmp.Or(cfg.Image, DefaultImage)
	cfg.Runtime = cmp.Or(cfg.Runtime, DefaultRuntime)
	cfg.Defaults(DefaultBootTimeout)
	lg := cfg.Logger
	b := &Backend{cli: cli, info: cli, cfg: cfg, log: lg, boxes: boxes.New[*box]("docker", lg)}
	b.Ops = boxes.NewOps(b.boxes, b.missing)
	b.pool = boxes.NewPool(b.boxes, cfg.PoolDir)
	return b
}

// Close closes the agent connections and the client; containers keep running
// (a later Reconcile adopts them).
func (b *Backend) Close() error {
	b.renames.Wait()
	for _, bx := range b.boxes.TakeAll() {
		bx.conn.Close()
	}
	b.ooms.Close()
	return b.cli.Close()
}

// Name returns "docker".
func (b *Backend) Name() string { return "docker" }

// Available checks every prerequisite of a sandbox, naming the first one
// missing: the daemon, the agent binary, the runtime (registered with the
// daemon) and the image.
func (b *Backend) Available(ctx context.Context) error {
	if _, err := b.cli.Ping(ctx); err != nil {
		return fmt.Errorf("docker: daemon: %w", err)
	}
	if err := boxes.CheckAgentBin(b.cfg.AgentBin); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	if b.cfg.Runtime != DefaultRuntime {
		info, err := b.cli.Info(ctx)
		if err != nil {
			return fmt.Errorf("docker: info: %w", err)
		}
		if _, ok := info.Runtimes[b.cfg.Runtime]; !ok {
			return fmt.Errorf("docker: runtime %q is not registered with the daemon (scripts/ci-docker.sh registers runsc)", b.cfg.Runtime)
		}
	}
	if _, err := b.cli.ImageInspect(ctx, b.cfg.Image); err != nil {
		return fmt.Errorf("docker: image %s (build it with `make sandbox-image`): %w", b.cfg.Image, err)
	}
	return nil
}

// ContainerName returns the Docker container name of a container id.
func (b *Backend) ContainerName(id string) string {
	return "threadbox-" + b.cfg.Instance + "-" + hostdirs.SafeID(id)
}

// Ensure boots the sandbox for spec.ID unless it is already running. A
// sandbox that died (killed, out of memory, daemon restart) is replaced by a
// fresh one over the same host folders.
func (b *Backend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if err := b.boxes.Ensure(ctx, spec, b.cfg.Dirs, b.boot); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
}

// agentAsRoot reports whether the agent runs as the sandbox's root and its
// commands as the sandbox user. Under gVisor the sandbox's root is the
// application kernel's, not the host's, and a uid of its own is the only way
// to keep code out of the agent: gVisor lets a process of the same uid open
// a non-dumpable process's descriptors and SIGKILL the namespace's init.
// Under runc the agent shares the sandbox user (a root agent would be the
// host's root), made unreachable by the kernel (not dumpable, init).
func (b *Backend) agentAsRoot() bool { return b.cfg.Runtime == "runsc" }

// hostConfig builds the hardened host configuration of one sandbox.
// A warm sandbox's folders are bound with rslave propagation, so the
// container's folders bound on the slot later reach it.
func (b *Backend) hostConfig(spec sandbox.Spec, warm bool) *container.HostConfig {
	l := spec.Limits.Or(b.cfg.Limits)
	mem, pids, nofile, tmp := l.MemoryBytes, l.Pids, l.NoFile, l.TmpBytes
	binds := []string{b.cfg.AgentBin + ":" + sandbox.AgentPath + ":ro"}
	if b.cfg.TrustDir != "" {
		binds = append(binds, b.cfg.TrustDir+":"+boxes.TrustPath+":ro")
	}
	for _, m := range spec.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		if warm {
			mode += ",rslave"
		}
		binds = append(binds, m.Source+":"+m.Target+":"+mode)
	}
	var capAdd []string
	if b.agentAsRoot() {
		// The agent's powers over the commands it runs as the sandbox user:
		// becoming it, killing its processes, handing it the folders it
		// makes and cleaning them up. Commands lose them with the uid.
		capAdd = []string{"SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE"}
	}
	return &container.HostConfig{
		Binds:          binds,
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		CapAdd:         capAdd,
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmp)},
		IpcMode:        "private",
		Runtime:        b.cfg.Runtime,
		Init:           new(false), // the agent is init
		LogConfig:      container.LogConfig{Type: "none"},
		Resources: container.Resources{
			Memory:     mem,
			MemorySwap: mem,
			CPUPeriod:  sandbox.CPUPeriodMicros,
			CPUQuota:   l.CPUQuotaMicros(),
			PidsLimit:  &pids,
			Ulimits:    []*container.Ulimit{{Name: "nofile", Soft: nofile, Hard: nofile}},
		},
	}
}

func (b *Backend) boot(ctx context.Context, spec sandbox.Spec) (*box, error) {
	return b.bootBox(ctx, spec, false)
}

// bootBox boots one sandbox; warm marks it as the warm pool's.
func (b *Backend) bootBox(ctx context.Context, spec sandbox.Spec, warm bool) (*box, error) {
	name := b.ContainerName(spec.ID)
	user, env := fmt.Sprintf("%d:%d", hostdirs.SandboxUID, hostdirs.SandboxGID), slices.Clone(spec.Env)
	if b.agentAsRoot() {
		user = "0:0"
		env = append(env, fmt.Sprintf("THREADBOX_AGENT_RUN_AS=%d:%d", hostdirs.SandboxUID, hostdirs.SandboxGID))
	}
	if b.cfg.TrustDir != "" {
		env = append(env, boxes.TrustEnv()...)
	}
	cfg := &container.Config{
		Image:        b.cfg.Image,
		Entrypoint:   []string{sandbox.AgentPath},
		Cmd:          []string{},
		User:         user,
		WorkingDir:   sandbox.WorkspaceDir,
		Env:          env,
		OpenStdin:    true,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		StdinOnce:    false,
		Tty:          false,
		Labels: map[string]string{
			LabelManaged:   "true",
			LabelInstance:  b.cfg.Instance,
			LabelContainer: spec.ID,
		},
	}
	if warm {
		cfg.Labels[LabelWarm] = "true"
	}
	hc := b.hostConfig(spec, warm)
	var ln *net.UnixListener
	if dir := b.socketDir(spec.ID); dir != "" {
		var err error
		if ln, err = listenAgent(dir); err != nil {
			return nil, err
		}
		defer ln.Close()
		hosts, err := writeHosts(dir)
		if err != nil {
			return nil, err
		}
		cfg.Env = append(slices.Clone(cfg.Env), "THREADBOX_AGENT_DIAL="+SocketMount+"/"+socketName)
		hc.Binds = append(hc.Binds, dir+":"+SocketMount+":ro", hosts+":/etc/hosts:ro")
		// No network at all rather than the daemon's network "none": the
		// container still gets a network namespace of its own with only
		// its loopback (runc makes it and brings lo up), but the daemon
		// sets up no network sandbox for it, and runc runs no prestart
		// hook that starts the daemon's binary again to hand it over,
		// which was half of every start (docs/benchmarks.md). The daemon
		// then writes no /etc/hosts either: the folder's own says
		// localhost.
		cfg.NetworkDisabled = true
		// The protocol goes over the socket: the agent's stdin is
		// /dev/null, and the daemon keeps no stdin pipe for it.
		cfg.OpenStdin, cfg.AttachStdin = false, false
	}
	// The create is not cut short by a caller that goes (a stopped turn):
	// the daemon would finish it after the client left, leaving a
	// container that a removal just before had not found.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer ccancel()
	created, err := b.cli.ContainerCreate(cctx, cfg, hc, nil, nil, name)
	if errdefs.IsConflict(err) {
		// A leftover container of that name (stopped, orphaned, dead).
		if err := b.cli.ContainerRemove(cctx, name, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("remove stale %s: %w", name, err)
		}
		created, err = b.cli.ContainerCreate(cctx, cfg, hc, nil, nil, name)
	}
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	fail := func(err error) (*box, error) {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.cli.ContainerRemove(rmCtx, created.ID, container.RemoveOptions{Force: true})
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	// Attach before start, so not one byte of the agent's output is lost.
	bx, err := b.attach(ctx, spec.ID, name, created.ID, ln == nil)
	if err != nil {
		return fail(err)
	}
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		bx.conn.Close()
		return fail(fmt.Errorf("start: %w", err))
	}
	bx.startedAt = time.Now()
	// The OOM counter (and the socket's peer check) need the init's pid;
	// find it while the agent starts.
	initPid := make(chan int, 1)
	go func() {
		defer close(bx.oomReady)
		defer close(initPid)
		ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if in, err := b.cli.ContainerInspect(ictx, created.ID); err == nil && in.State != nil {
			b.findCgroups(bx, in.State.Pid)
			initPid <- in.State.Pid
		}
	}()
	if ln != nil {
		actx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
		conn, err := acceptAgent(actx, ln, bx.done, initPidFrom(initPid), true)
		cancel()
		if err != nil {
			bx.conn.Close()
			return fail(fmt.Errorf("%w%s", err, b.deathReason(bx)))
		}
		b.useSocket(bx, conn)
	}
	if err := boxes.Handshake(ctx, b.cfg.BootTimeout, bx.agent, bx.done); err != nil {
		bx.conn.Close()
		return fail(fmt.Errorf("%w%s", err, b.deathReason(bx)))
	}
	b.log.Info("sandbox booted", "id", spec.ID, "container", name, "runtime", b.cfg.Runtime)
	return bx, nil
}

// attach opens the container's attached stream, whose end tells that the
// container ended. With stdio it is also the agent's connection (stdin and
// stdout) and gets the agent client; otherwise it carries only the agent's
// log and useSocket adds the client.
func (b *Backend) attach(ctx context.Context, id, name, dockerID string, stdio bool) (*box, error) {
	hj, err := b.cli.ContainerAttach(ctx, dockerID, container.AttachOptions{Stream: true, Stdin: stdio, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	stderr := boxes.NewLogTail(b.log, "agent", id)
	bx := &box{b: b, id: id, name: name, dockerID: dockerID, done: make(chan struct{}), oomReady: make(chan struct{}), lastUsed: time.Now()}
	var stdout io.Writer = stderr
	var pw *io.PipeWriter
	if stdio {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		stdout = pw
		rw := agent.NewConn(pr, hj.Conn, func() error {
			pr.Close()
			return hj.Conn.Close()
		})
		bx.conn = rw
		bx.agent = boxes.NewAgent(rw)
	} else {
		bx.conn = hj.Conn
	}
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, hj.Reader)
		if err == nil {
			err = io.EOF
		}
		if pw != nil {
			pw.CloseWithError(fmt.Errorf("sandbox stream ended: %w", err))
		}
		hj.Conn.Close()
		bx.oomWatch.End()
		close(bx.done)
	}()
	return bx, nil
}

// useSocket makes conn, from the agent socket, bx's agent connection,
// and returns its client.
func (b *Backend) useSocket(bx *box, conn *net.UnixConn) *agent.Client {
	cl := boxes.NewAgent(conn)
	bx.conn = closers{conn, bx.conn}
	bx.agent = cl
	return cl
}

// deathReason describes why a sandbox's container ended, from inspect.
func (b *Backend) deathReason(bx *box) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, err := b.cli.ContainerInspect(ctx, bx.dockerID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return ": container removed"
		}
		return ""
	}
	if in.State == nil || in.State.Running {
		return ""
	}
	var parts []string
	// The daemon's OOMKilled misses a kill whose event reached it after
	// the exit's; boxes.Ops.Exec tells that from the kill counts around
	// the command (OOMKills), which the watch keeps past the container.
	if in.State.OOMKilled {
		parts = append(parts, "out of memory")
	}
	parts = append(parts, fmt.Sprintf("exit code %d", in.State.ExitCode))
	if in.State.Error != "" {
		parts = append(parts, in.State.Error)
	}
	return ": container ended (" + strings.Join(parts, ", ") + ")"
}

// Agent returns the sandbox's agent connection.
func (bx *box) Agent() boxes.Agent { return bx.agent }

// Kill closes the agent connection and the attach stream; the container
// stays until Stop removes it.
func (bx *box) Kill() { bx.conn.Close() }

// Done is closed when the container's attach stream has ended.
func (bx *box) Done() <-chan struct{} { return bx.done }

// StartedAt returns when the container started.
func (bx *box) StartedAt() time.Time { return bx.startedAt }

// OOMKills reads the container's memory control group's kill counter,
// and once the group went with the container, what its watch counted.
func (bx *box) OOMKills() (int64, bool) { return bx.oomWatch.Kills(bx.oomCounter()) }

// Why says why the container ended, from inspect.
func (bx *box) Why() string { return strings.TrimPrefix(bx.b.deathReason(bx), ": ") }

// Exec runs cmd through the sandbox's agent (boxes.Exec); the sandbox
// counts as in use meanwhile.
func (b *Backend) Exec(ctx context.Context, id string, cmd sandbox.Command) (sandbox.Result, error) {
	if bx := b.boxes.Get(id); bx != nil {
		bx.touch(+1)
		defer bx.touch(-1)
	}
	return b.Ops.Exec(ctx, id, cmd)
}

// missing reports whether the daemon has no container of id.
func (b *Backend) missing(ctx context.Context, id string) bool {
	st, err := b.Status(ctx, id)
	return err == nil && st.State == sandbox.StateMissing
}

// findCgroups finds the control group counters of bx from its init's
// pid and starts watching its memory kills.
func (b *Backend) findCgroups(bx *box, pid int) {
	oom, cpu := cgroupacct.OOMForProcess(pid, "/sys/fs/cgroup"), cgroupacct.ForProcess(pid, "/sys/fs/cgroup")
	bx.mu.Lock()
	bx.oom, bx.cpu = oom, cpu
	bx.mu.Unlock()
	if oom.Path == "" {
		return
	}
	if w, err := b.ooms.Watch(oom); err == nil {
		bx.oomWatch.Set(w)
	} else {
		b.log.Warn("sandbox memory kills not watched", "id", bx.id, "cause", err.Error())
	}
}

func (bx *box) oomCounter() cgroupacct.OOM {
	select {
	case <-bx.oomReady:
	case <-time.After(5 * time.Second):
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.oom
}

func (bx *box) touch(delta int) {
	bx.mu.Lock()
	bx.active += delta
	bx.lastUsed = time.Now()
	bx.mu.Unlock()
}

// Stop shuts the sandbox down and removes its Docker container; the host
// folders stay.
func (b *Backend) Stop(ctx context.Context, id string) error {
	defer b.boxes.Lock(id)()
	bx, _ := b.boxes.Take(id)
	target := b.ContainerName(id)
	if bx != nil {
		bx.conn.Close()
		if bx.renamed != nil {
			// A claim's rename in flight would race the removal.
			<-bx.renamed
		}
		if bx.dockerID != "" {
			// A claimed sandbox whose rename failed still has its slot's name.
			target = bx.dockerID
		}
	}
	err := b.cli.ContainerRemove(ctx, target, container.RemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("docker: stop %s: %w", id, err)
	}
	sock := id
	if sl, ok := b.pool.Drop(id); ok {
		// A warm sandbox is never used again once it stops: its slot goes.
		sock = sl.Name
	}
	if dir := b.socketDir(sock); dir != "" {
		_ = os.RemoveAll(dir)
	}
	if bx != nil {
		b.log.Info("sandbox stopped", "id", id, "container", bx.name)
	}
	return nil
}

// Remove stops the sandbox and forgets it. Host folders are the caller's
// (hostdirs.Layout.Remove).
func (b *Backend) Remove(ctx context.Context, id string) error {
	return b.boxes.Remove(ctx, id, b.Stop)
}

// Status reports the sandbox's state from this backend and the daemon.
func (b *Backend) Status(ctx context.Context, id string) (sandbox.Status, error) {
	if st, _ := b.Ops.Status(ctx, id); st.State == sandbox.StateRunning {
		return st, nil
	}
	in, err := b.cli.ContainerInspect(ctx, b.ContainerName(id))
	if errdefs.IsNotFound(err) {
		return sandbox.Status{State: sandbox.StateMissing}, nil
	}
	if err != nil {
		return sandbox.Status{}, fmt.Errorf("docker: status %s: %w", id, err)
	}
	// A container without a live agent connection cannot serve: stopped.
	st := sandbox.Status{State: sandbox.StateStopped}
	if in.State != nil {
		st.StartedAt, _ = time.Parse(time.RFC3339Nano, in.State.StartedAt)
	}
	return st, nil
}

// CPUTime reads the container's control group on the host, once it is
// known: every process in it counts, the agent's and what commands left
// running too.
func (bx *box) CPUTime(ctx context.Context) (time.Duration, error) {
	select {
	case <-bx.oomReady:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	bx.mu.Lock()
	c := bx.cpu
	bx.mu.Unlock()
	d, ok := c.Read()
	if !ok {
		return 0, boxes.ErrCPUNotCounted
	}
	return d, nil
}

// Reconcile finds this instance's containers that this process does not
// run and does what decide says with each: adopt a running one (kept when
// its agent answers; otherwise removed), remove it, or leave it to the
// process that holds it. Containers without this instance's labels are never
// touched; a stopped container is removed unless left.
func (b *Backend) Reconcile(ctx context.Context, decide func(id string) sandbox.Verdict) (adopted, removed []string, err error) {
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelInstance+"="+b.cfg.Instance),
	)})
	if err != nil {
		return nil, nil, fmt.Errorf("docker: reconcile: %w", err)
	}
	warmSeen := map[string]bool{}
	var errs []error
	for _, c := range list {
		id, warmName := b.reconcileID(c.Labels, c.Names)
		if warmName != "" {
			warmSeen[warmName] = true
		}
		v := b.boxes.Verdict(id, decide)
		if warmName != "" && id == warmName && v == sandbox.Adopt {
			// A warm sandbox nobody claimed belongs to no pool once its
			// process is gone.
			v = sandbox.Drop
		}
		if v == sandbox.Leave {
			continue
		}
		if v == sandbox.Adopt && c.State == "running" && b.adopt(ctx, id, c.ID) {
			if warmName != "" {
				b.pool.Hold(id, b.pool.Slot(warmName))
				if len(c.Names) > 0 && strings.TrimPrefix(c.Names[0], "/") != b.ContainerName(id) {
					// Claimed, but its server went before the rename.
					if err := b.rename(ctx, c.ID, b.ContainerName(id)); err != nil {
						b.log.Warn("adopted sandbox keeps its slot's name", "id", id, "slot", warmName, "cause", err.Error())
					}
				}
			}
			adopted = append(adopted, id)
			continue
		}
		// Another removal under way (the pool's own cleanup of a warm
		// sandbox) removes it as well; any other failure is reported after
		// the rest are done, so that one container does not keep the
		// others from being adopted.
		if err := b.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
			errs = append(errs, fmt.Errorf("docker: reconcile: remove %s: %w", c.ID, err))
			continue
		}
		sock := id
		if warmName != "" {
			sock = warmName
			b.pool.Remove(b.pool.Slot(warmName))
		}
		if sock != "" {
			if dir := b.socketDir(sock); dir != "" {
				_ = os.RemoveAll(dir)
			}
		}
		removed = append(removed, id)
	}
	b.removeStraySlots(warmSeen)
	if len(adopted)+len(removed) > 0 {
		b.log.Info("sandboxes reconciled", "adopted", len(adopted), "removed", len(removed))
	}
	return adopted, removed, errors.Join(errs...)
}

// adopt re-attaches to a running sandbox and keeps it when its agent answers.
func (b *Backend) adopt(ctx context.Context, id, dockerID string) bool {
	defer b.boxes.Lock(id)()
	if b.boxes.Get(id) != nil {
		return true
	}
	in, err := b.cli.ContainerInspect(ctx, dockerID)
	if err != nil || in.Config == nil || in.Config.Image != b.cfg.Image || in.HostConfig == nil || in.HostConfig.Runtime != b.cfg.Runtime {
		return false
	}
	dir := socketSource(in)
	bx, err := b.attach(ctx, id, strings.TrimPrefix(in.Name, "/"), dockerID, dir == "")
	if err != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if dir != "" {
		// The agent dials again once its old host is gone; only the
		// container's init may take the socket (fresh is false: commands
		// are running in there).
		ln, err := listenAgent(dir)
		if err != nil {
			bx.conn.Close()
			return false
		}
		conn, err := acceptAgent(pctx, ln, bx.done, func() (int, error) { return in.State.Pid, nil }, false)
		if err != nil {
			b.log.Warn("sandbox not adopted", "id", id, "err", err)
			bx.conn.Close()
			return false
		}
		cl := b.useSocket(bx, conn)
		// The agent kept its tagged sessions (interpreters, terminals)
		// from the old host; the release names them to this one, which
		// attaches to them by tag, and numbers its requests above the
		// old host's.
		if err := cl.Release(pctx); err != nil {
			b.log.Warn("sandbox not adopted", "id", id, "err", err)
			bx.conn.Close()
			return false
		}
	}
	if err := bx.agent.Ping(pctx); err != nil {
		bx.conn.Close()
		return false
	}
	bx.startedAt, _ = time.Parse(time.RFC3339Nano, in.State.StartedAt)
	b.findCgroups(bx, in.State.Pid)
	close(bx.oomReady)
	b.boxes.Put(id, bx)
	return true
}

var _ sandbox.Backend = (*Backend)(nil)

// RemoveInstance removes every container of instance from the daemon that
// the environment names, then the warm pool slots under poolDirs (the
// instance's Config.PoolDir, DATA_DIR/pool for a server). threadbox keeps
// its sandboxes, and the slots of claimed ones, when it stops (a restart
// adopts them); this is for servers that must leave nothing behind, such as
// those of tests and benchmarks.
func RemoveInstance(ctx context.Context, instance string, poolDirs ...string) error {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker: client: %w", err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+instance))})
	if err != nil {
		return fmt.Errorf("docker: list %s: %w", instance, err)
	}
	// A few removals at once: one at a time, a thousand sandboxes took
	// minutes, most of it waiting on the daemon's round trips.
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	todo := make(chan string)
	for range min(len(list), 4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range todo {
				if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, c := range list {
		todo <- c.ID
	}
	close(todo)
	wg.Wait()
	for _, dir := range poolDirs {
		errs = append(errs, slot.Clean(dir))
	}
	return errors.Join(errs...)
}
