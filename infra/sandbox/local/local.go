// Package local runs sandboxes as bubblewrap jails on this host: one bwrap
// process per sandbox over the sandbox image's root filesystem folder
// (read-only), in new user, pid, ipc, net, uts and mount namespaces, with
// the sandbox folders bound in and the threadbox agent as the jail's
// init speaking the agent protocol over the bwrap process's stdin and
// stdout. Limits go through a cgroup per jail where the host lets this
// process create one, otherwise through rlimits.
//
// A jail shares the host kernel and is meant for trusted self-hosting and
// development only: it is a development jail, not a sandbox for untrusted
// code, and it is never a fallback unless SANDBOX_BACKEND lists it.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
)

// Defaults applied to zero fields of Config (sandbox.DefaultLimits fills
// the zero limits).
const (
	DefaultBootTimeout = 30 * time.Second
	DefaultCgroupRoot  = "/sys/fs/cgroup"
	DefaultStageDir    = "/run/threadbox-local"
)

// Warning says what the local backend is not; Backend.Warning returns it,
// for the start-up log and the capability matrix.
const Warning = "development jail: bubblewrap on this host's kernel, for trusted self-hosting and development, not a sandbox for untrusted code"

// LimitMode says how a Backend enforces limits.
type LimitMode string

// The limit modes.
const (
	// LimitCgroupV1 puts each jail in its own memory, pids and cpu cgroups (v1 hierarchies).
	LimitCgroupV1 LimitMode = "cgroup v1"
	// LimitCgroupV2 puts each jail in its own cgroup of the unified hierarchy.
	LimitCgroupV2 LimitMode = "cgroup v2"
	// LimitRlimits sets RLIMIT_DATA (per process, not per jail), RLIMIT_NPROC
	// and RLIMIT_NOFILE on the jail.
	LimitRlimits LimitMode = "rlimits"
)

// Config configures a Backend.
type Config struct {
	// Settings are what every backend takes: instance, limits, boot
	// timeout and logger.
	boxes.Settings

	// RootFS is the host folder holding the sandbox image's root filesystem
	// (sandbox/build-offline.sh --rootfs-only keeps it in
	// $CACHE/sandbox-rootfs/current). Required.
	RootFS string
	// AgentBin is the host path of the static threadbox-agent binary. Required.
	AgentBin string
	// Bwrap is the bubblewrap binary; default "bwrap" looked up in PATH.
	Bwrap string
	// Dirs, when set, prepares each container's host folders before boot; a
	// Spec without Mounts then gets Dirs' mounts.
	Dirs *hostdirs.Layout
	// DiskQuota tells that Dirs enforces a per-container disk quota.
	DiskQuota bool
	// CgroupRoot is where the cgroup hierarchies are mounted; default
	// DefaultCgroupRoot.
	CgroupRoot string
	// NoCgroups forces rlimits even where cgroups could be used.
	NoCgroups bool
	// UID and GID are the host ids a jail runs as when this process is root
	// (the sandbox user of hostdirs by default). Otherwise the jail runs as
	// this process's user.
	UID, GID int
	// StageDir matters when this process is root. Each jail's wrapper then
	// runs as root in a mount namespace of its own, mounts a small tmpfs on
	// this folder, binds the jail's host paths (root filesystem, agent, the
	// sandbox folders) into it and only then becomes the jail's user and bwrap,
	// which binds them from there. So the jail's user needs no access to
	// the folders on the way to them: threadbox creates DATA_DIR with mode
	// 0700. The folder itself is created empty (0755) when missing; nothing
	// is mounted on it outside the jails' namespaces, which end with them.
	// Default DefaultStageDir.
	StageDir string
	// PoolDir, when set and this process is root, is a host folder for the
	// warm jails' slots (infra/sandbox/slot): Warm boots jails whose
	// folders Claim binds later. This process's alone.
	PoolDir string
}

// Backend runs sandboxes as bubblewrap jails. It implements sandbox.Backend.
type Backend struct {
	cfg Config
	log *slog.Logger

	// A jail's processes are host processes, which only CRIU could save.
	boxes.FilesOnly

	modeOnce sync.Once
	mode     LimitMode
	modeWhy  string

	availMu sync.Mutex
	availAt time.Time // last successful probe

	boxes            *boxes.Set[*jail]
	boxes.Ops[*jail] // Exec, Start, Listen, Status, SandboxCPU

	pool       *boxes.Pool[*jail]
	slotsClean sync.Once
}

// jail is one running sandbox.
type jail struct {
	boxes.Proc // the host process is the jail's wrapper, then bwrap
	id         string
	cg         *cgroup // nil with rlimits
	stderr     *boxes.LogTail
}

// New returns a local backend. A missing root filesystem or agent binary
// is not an error here: Available reports it, so that the backend stays
// listed, unavailable with the reason, where SANDBOX_BACKEND names it.
func New(cfg Config) (*Backend, error) {
	cfg.Bwrap = cmp.Or(cfg.Bwrap, "bwrap")
	cfg.CgroupRoot = cmp.Or(cfg.CgroupRoot, DefaultCgroupRoot)
	if cfg.UID == 0 {
		cfg.UID = hostdirs.SandboxUID
	}
	if cfg.GID == 0 {
		cfg.GID = hostdirs.SandboxGID
	}
	cfg.StageDir = cmp.Or(cfg.StageDir, DefaultStageDir)
	cfg.Defaults(DefaultBootTimeout)
	lg := cfg.Logger
	set := boxes.New[*jail]("local", lg)
	return &Backend{cfg: cfg, log: lg, boxes: set, Ops: boxes.NewOps(set, nil), pool: boxes.NewPool(set, cfg.PoolDir),
		FilesOnly: boxes.KeepsFilesOnly("local", checkpointReason)}, nil
}

// Name returns "local".
func (b *Backend) Name() string { return "local" }

// Warning returns Warning: a jail is a development jail, not a sandbox for
// untrusted code. The caller logs it at start and shows it to admins.
func (b *Backend) Warning() string { return Warning }

// Isolation returns the isolation level of a jail.
func (b *Backend) Isolation() string { return "process jail" }

// LimitMode returns how limits are enforced on this host, and why cgroups
// are not used when they are not.
func (b *Backend) LimitMode() (LimitMode, string) {
	b.modeOnce.Do(func() { b.mode, b.modeWhy = detectMode(b.cfg) })
	return b.mode, b.modeWhy
}

// EnforcedLimits names the limits a jail enforces on this host ("memory",
// "cpu", "pids", "nofile", "tmp", "disk") and the mechanism behind them.
func (b *Backend) EnforcedLimits(ctx context.Context) ([]string, string) {
	mode, _ := b.LimitMode()
	var out []string
	switch mode {
	case LimitCgroupV1, LimitCgroupV2:
		out = []string{"memory", "cpu", "pids", "nofile", "tmp"}
	default:
		// RLIMIT_DATA bounds each process's heap, RLIMIT_NPROC the
		// processes of the jail's user: approximations of memory and pids.
		out = []string{"memory", "pids", "nofile", "tmp"}
	}
	if b.cfg.DiskQuota {
		out = append(out, "disk")
	}
	return out, string(mode)
}

// Available checks bubblewrap, user namespaces, the root filesystem and the
// agent binary by starting a throwaway jail. A success is remembered for a
// few seconds.
func (b *Backend) Available(ctx context.Context) error {
	b.availMu.Lock()
	defer b.availMu.Unlock()
	if !b.availAt.IsZero() && time.Since(b.availAt) < 10*time.Second {
		return nil
	}
	bw, err := exec.LookPath(b.cfg.Bwrap)
	if err != nil {
		return fmt.Errorf("local: bubblewrap (install the Debian package bubblewrap): %w", err)
	}
	if err := boxes.CheckRootFS(b.cfg.RootFS); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if err := boxes.CheckAgentBin(b.cfg.AgentBin); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	st, err := b.newStage()
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The probe loads the jails' seccomp filter too: a kernel that refuses
	// it makes the backend unavailable, never a jail without it.
	filterArgs, filter, err := jailFilter()
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if filter != nil {
		defer filter.Close()
	}
	args := append(filterArgs, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
		"--die-with-parent", "--uid", strconv.Itoa(hostdirs.SandboxUID), "--gid", strconv.Itoa(hostdirs.SandboxGID),
		"--ro-bind", st.path(b.cfg.RootFS), "/", "--tmpfs", sandbox.AgentDir, "--ro-bind", st.path(b.cfg.AgentBin), sandbox.AgentPath,
		sandbox.AgentPath, "-h")
	cmd := b.command(pctx, bw, nil, st, args, []string{"PATH=" + jailPath}, false)
	if filter != nil {
		cmd.ExtraFiles = []*os.File{filter}
	}
	out, err := cmd.CombinedOutput()
	// The agent prints its usage and exits 0 for -h; bwrap fails first when
	// namespaces or mounts are refused.
	if err != nil && !strings.Contains(string(out), "Usage of threadbox-agent") {
		return fmt.Errorf("local: bubblewrap cannot start a jail (user namespaces allowed? root filesystem and agent readable by uid %d?): %w: %s",
			b.jailUID(), err, strings.TrimSpace(string(out)))
	}
	b.availAt = time.Now()
	return nil
}

// jailUID is the host uid a jail runs as.
func (b *Backend) jailUID() int {
	if os.Geteuid() == 0 {
		return b.cfg.UID
	}
	return os.Geteuid()
}

// staged reports whether jails stage their host paths (Config.StageDir):
// when this process is root.
func staged() bool { return os.Geteuid() == 0 }

// procAttr puts the wrapper in a process group of its own that dies with
// this process; as root, also in a mount namespace of its own (Go makes its
// mounts private), where it stages the jail's paths before it drops to the
// jail's user, so that uid 1000 inside is uid 1000 outside and owns the
// workspace as it does under Docker.
func (b *Backend) procAttr(warm bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if staged() && !warm {
		a.Unshareflags = syscall.CLONE_NEWNS
	}
	return a
}

// stage maps the host paths a jail binds to the paths bwrap binds them
// from: as root, fresh names in the stage folder, which the wrapper binds
// them to (Config.StageDir); otherwise the paths themselves.
type stage struct {
	dir            string         // "" when not staging
	mount, setpriv string         // the tools the wrapper stages with
	unshare        string         // unshare(1), for warm jails; "" when missing
	specs          []string       // what the wrapper binds, in order: "d:<path>" or "f:<path>"
	index          map[string]int // host path -> position in specs
}

// newStage returns the stage of one jail, checking what staging needs.
func (b *Backend) newStage() (*stage, error) {
	if !staged() {
		return &stage{}, nil
	}
	st := &stage{dir: b.cfg.StageDir, index: map[string]int{}}
	var err error
	if st.mount, err = exec.LookPath("mount"); err != nil {
		return nil, fmt.Errorf("stage: mount (util-linux): %w", err)
	}
	if st.setpriv, err = exec.LookPath("setpriv"); err != nil {
		return nil, fmt.Errorf("stage: setpriv (util-linux): %w", err)
	}
	st.unshare, _ = exec.LookPath("unshare")
	if err := os.MkdirAll(st.dir, 0o755); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	return st, nil
}

// path returns where bwrap finds host path src.
func (s *stage) path(src string) string {
	if s.dir == "" {
		return src
	}
	i, ok := s.index[src]
	if !ok {
		kind := "d:"
		if fi, err := os.Stat(src); err == nil && !fi.IsDir() {
			kind = "f:"
		}
		i = len(s.specs)
		s.specs = append(s.specs, kind+src)
		s.index[src] = i
	}
	return s.dir + "/" + strconv.Itoa(i)
}

// command returns the process that starts a jail: /bin/sh running wrapper,
// which joins the cgroup.procs files procs, stages st's paths, sets the
// rlimits env asks for and becomes bwrap with args (as the jail's user).
//
// A warm jail's wrapper gets its mount namespace from unshare(1) as a
// slave of the host's, not from CLONE_NEWNS (which Go makes private), so
// the folders Claim binds on its slot later propagate into the jail.
func (b *Backend) command(ctx context.Context, bw string, procs []string, st *stage, args, env []string, warm bool) *exec.Cmd {
	shArgs := append([]string{"-c", wrapper, "threadbox-local"}, procs...)
	shArgs = append(shArgs, "--")
	shArgs = append(shArgs, st.specs...)
	shArgs = append(shArgs, "--", bw)
	shArgs = append(shArgs, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", shArgs...)
	if warm && st.unshare != "" {
		cmd = exec.CommandContext(ctx, st.unshare, append([]string{"--mount", "--propagation", "slave", "--", "/bin/sh"}, shArgs...)...)
	}
	if st.dir != "" {
		env = append(env, "TB_STAGE="+st.dir, "TB_MOUNT="+st.mount, "TB_SETPRIV="+st.setpriv,
			"TB_UID="+strconv.Itoa(b.cfg.UID), "TB_GID="+strconv.Itoa(b.cfg.GID))
	}
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = b.procAttr(warm)
	return cmd
}

// Ensure boots the jail for spec.ID unless it is running. A jail that died
// is replaced by a fresh one over the same host folders.
func (b *Backend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if err := b.boxes.Ensure(ctx, spec, b.cfg.Dirs, b.boot); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}

// limits fills the zero fields of l from the backend's defaults.
func (b *Backend) limits(l sandbox.Limits) sandbox.Limits { return l.Or(b.cfg.Limits) }

// bwrapArgs builds the bubblewrap command line of one jail; path maps each
// host path to where bwrap finds it (stage.path).
func (b *Backend) bwrapArgs(spec sandbox.Spec, l sandbox.Limits, path func(string) string) []string {
	args := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
		"--uid", strconv.Itoa(hostdirs.SandboxUID), "--gid", strconv.Itoa(hostdirs.SandboxGID),
		"--hostname", "sandbox",
		"--new-session", "--die-with-parent", "--cap-drop", "ALL",
		// The agent is the jail's init (PID 1), not a child of bwrap's: the
		// kernel drops the signals that code in the jail sends to its
		// namespace's init unless init handles them, and the agent drops
		// those it handles, so code cannot stop it.
		"--as-pid-1",
		"--ro-bind", path(b.cfg.RootFS), "/",
		"--proc", "/proc",
		"--dev", "/dev",
		"--perms", "1777", "--size", strconv.FormatInt(l.TmpBytes, 10), "--tmpfs", "/tmp",
		"--tmpfs", sandbox.AgentDir,
		"--ro-bind", path(b.cfg.AgentBin), sandbox.AgentPath,
	}
	if b.cfg.TrustDir != "" {
		args = append(args, "--ro-bind", path(b.cfg.TrustDir), boxes.TrustPath)
	}
	args = append(args, "--remount-ro", "/opt/threadbox")
	for _, m := range spec.Mounts {
		flag := "--bind"
		if m.ReadOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, path(m.Source), m.Target)
	}
	args = append(args, "--chdir", sandbox.WorkspaceDir)
	return append(args, sandbox.AgentPath)
}

// jailEnv is the environment of the jail's agent and so of every command:
// passed through the wrapper's environment rather than bwrap's command
// line, where other host users could read it.
func jailEnv(spec sandbox.Spec) []string {
	env := []string{
		"PATH=" + jailPath,
		"HOME=/home/agent", "USER=agent", "LOGNAME=agent", "SHELL=/bin/bash", "LANG=C.UTF-8",
		// The host reads the jail's OOM counter; the agent cannot see it.
		"THREADBOX_AGENT_OOM_EVENTS=/nonexistent",
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" && !strings.HasPrefix(k, "TB_") {
			env = append(env, kv)
		}
	}
	return env
}

// jailPath is PATH inside the jail.
const jailPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// wrapper joins the jail's cgroups, stages its host paths, sets its rlimits
// and becomes bwrap. Its arguments: the cgroup.procs files to join, "--",
// the paths to stage ("d:<folder>" or "f:<file>", bound to $TB_STAGE/0, 1,
// ... in order), "--", then bwrap's command line. With $TB_STAGE set it runs
// as root in a mount namespace of its own (procAttr): it mounts a tmpfs
// there, binds the paths into it and drops to $TB_UID:$TB_GID (setpriv,
// which also clears the supplementary groups and capabilities) as it
// becomes bwrap.
const wrapper = `set -e
while [ "$1" != "--" ]; do echo $$ > "$1"; shift; done
shift
if [ -n "$TB_STAGE" ]; then
	"$TB_MOUNT" -t tmpfs -o mode=0755,size=64k,nosuid,nodev threadbox-stage "$TB_STAGE"
fi
i=0
while [ "$1" != "--" ]; do
	case "$1" in
	f:*) : > "$TB_STAGE/$i" ;;
	*) mkdir "$TB_STAGE/$i" ;;
	esac
	"$TB_MOUNT" --bind "${1#?:}" "$TB_STAGE/$i"
	i=$((i + 1))
	shift
done
shift
if [ -n "$TB_NOFILE" ]; then ulimit -n "$TB_NOFILE"; fi
if [ -n "$TB_DATA" ]; then ulimit -d "$TB_DATA"; fi
if [ -n "$TB_NPROC" ]; then ulimit -u "$TB_NPROC" 2>/dev/null || ulimit -p "$TB_NPROC"; fi
uid=$TB_UID gid=$TB_GID setpriv=$TB_SETPRIV
unset TB_NOFILE TB_DATA TB_NPROC TB_STAGE TB_MOUNT TB_SETPRIV TB_UID TB_GID
if [ -n "$uid" ]; then
	exec "$setpriv" --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all -- "$@"
fi
exec "$@"
`

func (b *Backend) boot(ctx context.Context, spec sandbox.Spec) (*jail, error) {
	return b.bootJail(ctx, spec, false)
}

// bootJail boots one jail; warm marks it as the warm pool's.
func (b *Backend) bootJail(ctx context.Context, spec sandbox.Spec, warm bool) (*jail, error) {
	bw, err := exec.LookPath(b.cfg.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap: %w", err)
	}
	l := b.limits(spec.Limits)
	j := &jail{id: spec.ID, Proc: boxes.NewProc(), stderr: boxes.NewLogTail(b.log, "jail", spec.ID)}
	mode, _ := b.LimitMode()
	st, err := b.newStage()
	if err != nil {
		return nil, err
	}
	var procs []string
	env := append(jailEnv(spec), "TB_NOFILE="+strconv.FormatInt(l.NoFile, 10))
	if b.cfg.TrustDir != "" {
		env = append(env, boxes.TrustEnv()...)
	}
	if mode == LimitCgroupV1 || mode == LimitCgroupV2 {
		cg, err := newCgroup(b.cfg, mode, spec.ID, l, b.jailUID())
		if err != nil {
			return nil, err
		}
		j.cg = cg
		procs = cg.procsFiles()
	} else {
		env = append(env, "TB_DATA="+strconv.FormatInt(l.MemoryBytes/1024, 10), "TB_NPROC="+strconv.FormatInt(l.Pids, 10))
	}
	// The jail lives past ctx (a request's): Stop and kill end it.
	if warm && st.unshare == "" {
		j.cg.remove()
		return nil, errors.New("warm jail: unshare (util-linux) not found")
	}
	filterArgs, filter, err := jailFilter()
	if err != nil {
		j.cg.remove()
		return nil, err
	}
	if filter != nil {
		defer filter.Close() // the wrapper has its own copy once started
	}
	cmd := b.command(context.WithoutCancel(ctx), bw, procs, st, append(filterArgs, b.bwrapArgs(spec, l, st.path)...), env, warm)
	if filter != nil {
		cmd.ExtraFiles = []*os.File{filter}
	}
	cmd.Stderr = j.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		j.cg.remove()
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		j.cg.remove()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		j.cg.remove()
		return nil, fmt.Errorf("start bubblewrap: %w", err)
	}
	j.Cmd = cmd
	j.Booted = time.Now()
	rw := agent.NewConn(stdout, stdin, stdin.Close)
	j.Client = boxes.NewAgent(rw)
	go func() {
		_ = cmd.Wait()
		j.Client.Close()
		j.cg.remove()
		j.Exited()
	}()
	if err := boxes.Handshake(ctx, b.cfg.BootTimeout, j.Client, j.Done()); err != nil {
		j.Kill()
		<-j.Done()
		return nil, fmt.Errorf("%w: %s", err, j.stderr.Tail())
	}
	b.log.Info("sandbox booted", "id", spec.ID, "limits", string(mode))
	return j, nil
}

// Kill ends the jail: its connection, the bwrap process group and, with
// cgroups, every process left in its cgroup.
func (j *jail) Kill() {
	j.Client.Close()
	j.KillGroup()
	j.cg.killAll()
}

// OOMKills reads the jail's control group's kill counter (none under
// rlimits).
func (j *jail) OOMKills() (int64, bool) { return j.cg.oomKills() }

// Why is not known of a jail: its host processes leave no record.
func (j *jail) Why() string { return "" }

// Stop kills the jail; its files stay. A warm jail is never used again
// once it stops: its slot goes, even when the jail ended by itself.
func (b *Backend) Stop(ctx context.Context, id string) error {
	return b.pool.Stop(ctx, id)
}

// Remove stops the jail and forgets it. Host folders are the caller's.
func (b *Backend) Remove(ctx context.Context, id string) error {
	return b.boxes.Remove(ctx, id, b.Stop)
}

// CPUTime reads the jail's control group: every process in it counts.
// Under rlimits no control group counts it.
func (j *jail) CPUTime(context.Context) (time.Duration, error) {
	d, ok := j.cg.cpuTime()
	if !ok {
		return 0, fmt.Errorf("%w: no control group accounts for it", sandbox.ErrUnsupported)
	}
	return d, nil
}

// Close kills every jail of this backend and removes its (then empty)
// cgroup folders.
func (b *Backend) Close() error {
	err := b.boxes.StopAll(b.Stop)
	// The slots of warm jails that ended by themselves.
	for _, id := range b.pool.IDs() {
		b.pool.Drop(id)
	}
	if mode, _ := b.LimitMode(); mode != LimitRlimits {
		removeParents(b.cfg)
	}
	return err
}

var _ sandbox.Backend = (*Backend)(nil)

// FindRootFS returns the root filesystem folder to use: $THREADBOX_ROOTFS,
// else the folder sandbox/build-offline.sh keeps in its cache
// ($THREADBOX_CACHE_DIR, else $DATA_DIR/cache, else /var/cache/threadbox,
// then sandbox-rootfs/current). It returns "" when neither holds /bin/bash.
func FindRootFS(getenv func(string) string) string {
	return boxes.FindCached(getenv, "THREADBOX_ROOTFS", "sandbox-rootfs", filepath.Join("bin", "bash"))
}
