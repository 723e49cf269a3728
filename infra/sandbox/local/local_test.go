package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestMain removes the agent binary the tests built once they end.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// These tests run real bubblewrap jails. They need root (for the jail's
// cgroups and the loop-mounted disk quota), bwrap and the sandbox root
// filesystem. Under CI=true a missing prerequisite fails them; otherwise
// they skip.

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// testRootFS finds the sandbox root filesystem: THREADBOX_ROOTFS, else the
// cache of build-offline.sh; under CI=true it builds it when missing.
func testRootFS(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() {
		if c := FindRootFS(os.Getenv); c != "" {
			rootDir, rootErr = filepath.EvalSymlinks(c)
			return
		}
		if os.Getenv("CI") != "true" {
			rootErr = fmt.Errorf("no sandbox root filesystem (set THREADBOX_ROOTFS or run sandbox/build-offline.sh --rootfs-only)")
			return
		}
		script, err := filepath.Abs("../../sandbox/build-offline.sh")
		if err != nil {
			rootErr = err
			return
		}
		cmd := exec.Command(script, "--rootfs-only")
		if out, err := cmd.CombinedOutput(); err != nil {
			rootErr = fmt.Errorf("build root filesystem: %w: %s", err, out)
			return
		}
		if c := FindRootFS(os.Getenv); c != "" {
			rootDir, rootErr = filepath.EvalSymlinks(c)
		} else {
			rootErr = errors.New("sandbox/build-offline.sh --rootfs-only left no root filesystem")
		}
	})
	if rootErr != nil {
		sandboxtest.Need(t, "%v", rootErr)
	}
	return rootDir
}

// prerequisites fails or skips the test unless jails can run here.
func prerequisites(t *testing.T) (rootfs, agentBin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "local backend tests need root (cgroups, loop quota)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		sandboxtest.Need(t, "bubblewrap not installed: %v", err)
	}
	return testRootFS(t), sandboxtest.AgentBin(t)
}

// newTestBackend returns a backend with its own cgroup instance, stopped
// at the end of the test.
func newTestBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	rootfs, bin := prerequisites(t)
	if cfg.RootFS == "" {
		cfg.RootFS = rootfs
	}
	if cfg.AgentBin == "" {
		cfg.AgentBin = bin
	}
	if cfg.Instance == "" {
		cfg.Instance = fmt.Sprintf("test%d", time.Now().UnixNano())
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Available(ctx); err != nil {
		sandboxtest.Need(t, "local backend not available: %v", err)
	}
	sandboxtest.Cleanup(t, func() { b.Close() })
	return b
}

// capsOf states what the backend enforces on this host.
func capsOf(b *Backend) sandboxtest.Capabilities {
	mode, _ := b.LimitMode()
	c := sandboxtest.Capabilities{Disk: true, Pids: true, Memory: sandboxtest.MemoryAllocFails}
	if mode != LimitRlimits {
		c.Memory = sandboxtest.MemoryOOMKill
		c.CPU = true
	}
	return c
}

func TestConformance(t *testing.T) {
	newBackend := func(t *testing.T) sandbox.Backend { return newTestBackend(t, Config{}) }
	probe := newTestBackend(t, Config{})
	sandboxtest.Run(t, newBackend, capsOf(probe))
}

func TestConformanceRlimits(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	newBackend := func(t *testing.T) sandbox.Backend { return newTestBackend(t, Config{NoCgroups: true}) }
	probe := newTestBackend(t, Config{NoCgroups: true})
	caps := capsOf(probe)
	// RLIMIT_NPROC counts every process of the jail's host user: it holds a
	// fork bomb but is shared with the other jails, so the bystander case
	// does not apply.
	caps.Pids = false
	sandboxtest.Run(t, newBackend, caps)
}

// The backend says it is a development jail; the server, not New, logs it
// (once, at start).
func TestWarning(t *testing.T) {
	var buf strings.Builder
	b, err := New(Config{Settings: boxes.Settings{Logger: slog.New(slog.NewTextHandler(&buf, nil))}, RootFS: "/nonexistent", AgentBin: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	if w := b.Warning(); !strings.Contains(w, "development jail") || !strings.Contains(w, "not a sandbox for untrusted code") {
		t.Errorf("Warning() = %q: want it to say development jail, not for untrusted code", w)
	}
	if buf.Len() != 0 {
		t.Errorf("New logged %q; the server logs the warning once", buf.String())
	}
}

func TestUnavailableSaysWhy(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no bwrap", Config{RootFS: "/", AgentBin: "/bin/true", Bwrap: "/nonexistent/bwrap"}, "bubblewrap"},
		{"no rootfs", Config{RootFS: t.TempDir(), AgentBin: "/bin/true", Bwrap: "/bin/true"}, "root filesystem"},
		{"rootfs not found", Config{AgentBin: "/bin/true", Bwrap: "/bin/true"}, "no root filesystem"},
		{"agent not found", Config{RootFS: "/", Bwrap: "/bin/true"}, "no agent binary"},
		{"no agent", Config{RootFS: "/", AgentBin: "/nonexistent/agent", Bwrap: "/bin/true"}, "agent binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = b.Available(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "local: ") {
				t.Errorf("Available: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestJailCommandLine(t *testing.T) {
	b, err := New(Config{RootFS: "/srv/rootfs", AgentBin: "/opt/agent"})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "x", Env: []string{"A=b=c"}, Mounts: []sandbox.Mount{
		{Source: "/d/ws", Target: sandbox.WorkspaceDir},
		{Source: "/d/up", Target: sandbox.UploadsDir, ReadOnly: true},
	}}
	args := strings.Join(b.bwrapArgs(spec, b.limits(sandbox.Limits{TmpBytes: 1234}), func(p string) string { return p }), " ")
	for _, want := range []string{
		"--unshare-user --unshare-pid --unshare-ipc --unshare-net --unshare-uts",
		"--uid 1000 --gid 1000",
		"--new-session --die-with-parent --cap-drop ALL",
		"--ro-bind /srv/rootfs /",
		"--proc /proc", "--dev /dev",
		"--size 1234 --tmpfs /tmp",
		"--ro-bind /opt/agent " + sandbox.AgentPath, "--remount-ro /opt/threadbox",
		"--bind /d/ws " + sandbox.WorkspaceDir,
		"--ro-bind /d/up " + sandbox.UploadsDir,
		"--chdir " + sandbox.WorkspaceDir,
	} {
		if !strings.Contains(args, want) {
			t.Errorf("bwrap args lack %q:\n%s", want, args)
		}
	}
	if !strings.HasSuffix(args, " "+sandbox.AgentPath) {
		t.Errorf("the agent is not the jail's command: %s", args)
	}
	// The environment (tokens included) never shows on the command line.
	if strings.Contains(args, "b=c") {
		t.Errorf("environment on the command line: %s", args)
	}
	env := strings.Join(jailEnv(spec), " ")
	if !strings.Contains(env, "A=b=c") || !strings.Contains(env, "HOME=/home/agent") {
		t.Errorf("jail env %q", env)
	}
}

// As root, a jail binds its host paths from the stage folder, where its
// wrapper binds them first (folders and files told apart), each path once.
func TestJailCommandLineStaged(t *testing.T) {
	dir := t.TempDir()
	agentBin := filepath.Join(dir, "agent")
	if err := os.WriteFile(agentBin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{RootFS: dir, AgentBin: agentBin})
	if err != nil {
		t.Fatal(err)
	}
	st := &stage{dir: "/run/stage", index: map[string]int{}}
	spec := sandbox.Spec{ID: "x", Mounts: []sandbox.Mount{
		{Source: "/d/ws", Target: sandbox.WorkspaceDir},
		{Source: "/d/up", Target: sandbox.UploadsDir, ReadOnly: true},
		{Source: "/d/ws", Target: "/mnt/again"},
	}}
	args := strings.Join(b.bwrapArgs(spec, b.limits(sandbox.Limits{}), st.path), " ")
	for _, want := range []string{
		"--ro-bind /run/stage/0 /",
		"--ro-bind /run/stage/1 " + sandbox.AgentPath,
		"--bind /run/stage/2 " + sandbox.WorkspaceDir,
		"--ro-bind /run/stage/3 " + sandbox.UploadsDir,
		"--bind /run/stage/2 /mnt/again",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("bwrap args lack %q:\n%s", want, args)
		}
	}
	if strings.Contains(args, "/d/") || strings.Contains(args, dir) {
		t.Errorf("a host path is bound directly: %s", args)
	}
	if want := []string{"d:" + dir, "f:" + agentBin, "d:/d/ws", "d:/d/up"}; strings.Join(st.specs, " ") != strings.Join(want, " ") {
		t.Errorf("staged %q, want %q", st.specs, want)
	}
}

func TestCgroupLimitsWritten(t *testing.T) {
	b := newTestBackend(t, Config{})
	if mode, why := b.LimitMode(); mode != LimitCgroupV1 && mode != LimitCgroupV2 {
		sandboxtest.Need(t, "no cgroups on this host: %s", why)
	}
	lim := sandbox.Limits{MemoryBytes: 300 << 20, Pids: 77, CPUs: 0.5}
	if err := b.Ensure(context.Background(), sandbox.Spec{ID: "cg", Limits: lim}); err != nil {
		t.Fatal(err)
	}
	j := b.boxes.Get("cg")
	if j == nil || j.cg == nil {
		t.Fatal("jail without cgroup")
	}
	read := func(suffix string) string {
		for _, d := range j.cg.dirs {
			if data, err := os.ReadFile(filepath.Join(d, suffix)); err == nil {
				return strings.TrimSpace(string(data))
			}
		}
		return ""
	}
	mode, _ := b.LimitMode()
	if mode == LimitCgroupV1 {
		if got := read("memory.limit_in_bytes"); got != fmt.Sprint(300<<20) {
			t.Errorf("memory limit %q", got)
		}
		if got := read("cpu.cfs_quota_us") + " " + read("cpu.cfs_period_us"); got != "5000 10000" {
			t.Errorf("cpu quota %q", got)
		}
	}
	if got := read("pids.max"); got != "77" {
		t.Errorf("pids.max %q", got)
	}
	// Every process of the jail is in its cgroup.
	procs := read("cgroup.procs")
	if len(strings.Fields(procs)) < 2 {
		t.Errorf("cgroup.procs %q: want bwrap and the agent", procs)
	}
	dirs := j.cg.dirs
	if err := b.Stop(context.Background(), "cg"); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left after stop: %v", d, err)
		}
	}
	b.Close()
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Dir(d)); !os.IsNotExist(err) {
			t.Errorf("instance cgroup %s left after close: %v", filepath.Dir(d), err)
		}
	}
}

func TestEnforcedLimitsFollowMode(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		quota bool
		want  []string
		mech  LimitMode
	}{
		{"rlimits", Config{NoCgroups: true}, false, []string{"memory", "pids", "nofile", "tmp"}, LimitRlimits},
		{"rlimits with disk quota", Config{NoCgroups: true, DiskQuota: true}, true, []string{"memory", "pids", "nofile", "tmp", "disk"}, LimitRlimits},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.RootFS, tt.cfg.AgentBin = "/", "/bin/true"
			b, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, mech := b.EnforcedLimits(context.Background())
			if strings.Join(got, ",") != strings.Join(tt.want, ",") || mech != string(tt.mech) {
				t.Errorf("got %q %q, want %q %q", got, mech, tt.want, tt.mech)
			}
			if b.Isolation() != "process jail" {
				t.Errorf("isolation %q", b.Isolation())
			}
		})
	}
	// A cgroup root that is not a cgroup file system falls back to rlimits
	// and says why.
	b, _ := New(Config{RootFS: "/", AgentBin: "/bin/true", CgroupRoot: "/proc/nonexistent"})
	if mode, why := b.LimitMode(); mode != LimitRlimits || why == "" {
		t.Errorf("mode %q (%q), want rlimits with a reason", mode, why)
	}
}

func TestFindRootFS(t *testing.T) {
	cache := t.TempDir()
	rootfs := filepath.Join(cache, "sandbox-rootfs", "current")
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "bash"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"cache dir", map[string]string{"THREADBOX_CACHE_DIR": cache}, rootfs},
		{"explicit wins", map[string]string{"THREADBOX_ROOTFS": rootfs, "THREADBOX_CACHE_DIR": "/nonexistent"}, rootfs},
		{"explicit without bash falls back", map[string]string{"THREADBOX_ROOTFS": cache, "THREADBOX_CACHE_DIR": cache}, rootfs},
		{"nothing", map[string]string{"THREADBOX_CACHE_DIR": t.TempDir()}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FindRootFS(env(tt.env)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// A jail killed from outside (not through Stop) fails the pending command
// with sandbox.ErrUnavailable, and the next Ensure boots a fresh one.
func TestJailKilledFromOutside(t *testing.T) {
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	spec := sandbox.Spec{ID: "victim"}
	if err := b.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	j := b.boxes.Get("victim")
	errc := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "victim", sandboxtest.Sh("sleep 60", time.Minute))
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("pending exec: %v, want sandbox.ErrUnavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("pending exec did not return")
	}
	<-j.Done()
	if j.cg != nil {
		for _, d := range j.cg.dirs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("cgroup %s of the killed jail left: %v", d, err)
			}
		}
	}
	if st, _ := b.Status(ctx, "victim"); st.State != sandbox.StateStopped {
		t.Errorf("status %q after the kill, want stopped", st.State)
	}
	if err := b.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if j2 := b.boxes.Get("victim"); j2 == nil || j2 == j {
		t.Fatal("no fresh jail after the kill")
	}
	res, err := b.Exec(ctx, "victim", sandboxtest.Sh("echo back", 10*time.Second))
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "back" {
		t.Errorf("fresh jail: %q %v", res.Stdout, err)
	}
}

// TestPrivateFoldersAsRoot: as root, with the data folder (made 0700, as
// threadbox makes DATA_DIR), the agent and the root filesystem all behind
// folders the jail's user (uid 1000) cannot traverse, a jail still boots,
// reads and writes its folders as uid 1000, and leaves no mount behind.
func TestPrivateFoldersAsRoot(t *testing.T) {
	rootfs, bin := prerequisites(t)
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	agentBin := filepath.Join(private, "agent")
	src, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentBin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(private, "rootfs")
	if err := os.Symlink(rootfs, link); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(private, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	b := newTestBackend(t, Config{RootFS: link, AgentBin: agentBin, Dirs: hostdirs.New(data, hostdirs.Options{})})
	ctx := context.Background()
	if err := b.Ensure(ctx, sandbox.Spec{ID: "private"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(ctx, "private", sandboxtest.Sh("id -u; echo kept > notes.txt; cat notes.txt; echo out > /mnt/user-data/outputs/r.txt; touch /mnt/user-data/uploads/no 2>&1 || true", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); !strings.HasPrefix(got, "1000\nkept\n") || !strings.Contains(got, "Read-only file system") {
		t.Errorf("stdout %q stderr %q: want uid 1000, the workspace written, uploads read-only", got, res.Stderr)
	}
	d := hostdirs.New(data, hostdirs.Options{}).Dirs("private")
	for _, p := range []string{filepath.Join(d.Workspace, "notes.txt"), filepath.Join(d.Outputs, "r.txt")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != hostdirs.SandboxUID {
			t.Errorf("%s owned by uid %d, want %d", p, st.Uid, hostdirs.SandboxUID)
		}
	}
	for p, want := range map[string]os.FileMode{private: 0o700, data: 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v %v, want %o", p, fi.Mode(), err, want)
		}
	}
	if err := b.Stop(ctx, "private"); err != nil {
		t.Fatal(err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), "threadbox-stage") || strings.Contains(string(mounts), private) {
		t.Errorf("mounts left on the host:\n%s", mounts)
	}
}
