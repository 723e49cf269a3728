package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// These tests run real sandboxes against the Docker daemon. Under CI=true a
// missing daemon, image or runtime fails them; otherwise they skip. They run
// under every runtime of SANDBOX_TEST_RUNTIMES (default "runc"; CI sets
// "runc,runsc").

func runtimes() []string {
	v := os.Getenv("SANDBOX_TEST_RUNTIMES")
	if v == "" {
		v = "runc"
	}
	var out []string
	for _, r := range strings.Split(v, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// env is one test's backend on a private data dir and instance label.
type env struct {
	t       *testing.T
	runtime string
	data    string
	dirs    *hostdirs.Layout
	be      *Backend
	cfg     Config
}

type envOpts struct {
	limits    sandbox.Limits
	diskBytes int64
}

func newEnv(t *testing.T, runtime string, o envOpts) *env {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		sandboxtest.Need(t, "docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		sandboxtest.Need(t, "docker daemon not reachable (scripts/ci-docker.sh starts it): %v", err)
	}
	quota := hostdirs.QuotaNone
	if os.Getuid() == 0 {
		quota = hostdirs.QuotaLoop
	}
	if o.diskBytes == 0 {
		o.diskBytes = 256 << 20
	}
	data := t.TempDir()
	dirs := hostdirs.New(data, hostdirs.Options{Quota: quota, DiskBytes: o.diskBytes})
	cfg := Config{
		Settings:  boxes.Settings{Instance: fmt.Sprintf("test%d", time.Now().UnixNano()), Limits: o.limits},
		Image:     DefaultImage,
		Runtime:   runtime,
		AgentBin:  sandboxtest.AgentBin(t),
		Dirs:      dirs,
		SocketDir: filepath.Join(data, "run"),
	}
	e := &env{t: t, runtime: runtime, data: data, dirs: dirs, cfg: cfg}
	e.be = NewWithClient(cli, cfg)
	if err := e.be.Available(ctx); err != nil {
		cli.Close()
		sandboxtest.Need(t, "docker backend not available: %v", err)
	}
	sandboxtest.Cleanup(t, func() {
		ctx := context.Background()
		// Remove every container of this instance, then the quota mounts.
		e.be.Reconcile(ctx, adoptAll) // adopts live ones…
		for _, id := range e.be.boxes.IDs(nil) {
			e.be.Remove(ctx, id)
		}
		e.be.Close()
		entries, _ := os.ReadDir(filepath.Join(data, "containers"))
		for _, en := range entries {
			// Dirs' names are safe ids; Release takes the id, which equals it here.
			dirs.Release(ctx, en.Name())
		}
	})
	return e
}

// reopen returns a second Backend on the same data and instance, as after a
// threadbox restart.
func (e *env) reopen() *Backend {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		e.t.Fatal(err)
	}
	return NewWithClient(cli, e.cfg)
}

func (e *env) ensure(id string, limits sandbox.Limits) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.be.Ensure(ctx, sandbox.Spec{ID: id, Limits: limits}); err != nil {
		e.t.Fatalf("ensure %s: %v", id, err)
	}
}

func sh(script string, timeout time.Duration) sandbox.Command {
	return sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: timeout}
}

func (e *env) run(id, script string) sandbox.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := e.be.Exec(ctx, id, sh(script, 30*time.Second))
	if err != nil {
		e.t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return res
}

func forRuntimes(t *testing.T, fn func(t *testing.T, runtime string)) {
	for _, rt := range runtimes() {
		t.Run(rt, func(t *testing.T) { fn(t, rt) })
	}
}

func TestHardeningProbes(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt, envOpts{})
		e.ensure("probe", sandbox.Limits{})
		tests := []struct {
			name   string
			script string
			ok     func(r sandbox.Result) bool
		}{
			{"no capabilities", "grep CapEff /proc/self/status", func(r sandbox.Result) bool {
				return r.ExitCode == 0 && strings.Fields(string(r.Stdout))[1] == "0000000000000000"
			}},
			{"not root", "id -u", func(r sandbox.Result) bool {
				return r.ExitCode == 0 && strings.TrimSpace(string(r.Stdout)) != "0" && strings.TrimSpace(string(r.Stdout)) != ""
			}},
			{"read-only root", "touch /etc/x", func(r sandbox.Result) bool { return r.ExitCode != 0 }},
			{"read-only uploads", "touch /mnt/user-data/uploads/x", func(r sandbox.Result) bool { return r.ExitCode != 0 }},
			{"read-only skills", "touch /mnt/skills/x", func(r sandbox.Result) bool { return r.ExitCode != 0 }},
			{"writable workspace and outputs", "touch /home/agent/workspace/w /mnt/user-data/outputs/o /tmp/t && echo ok", func(r sandbox.Result) bool {
				return r.ExitCode == 0 && strings.TrimSpace(string(r.Stdout)) == "ok"
			}},
			{"only loopback", `python3 -c "import socket; print(' '.join(n for _, n in socket.if_nameindex()))"`, func(r sandbox.Result) bool {
				return r.ExitCode == 0 && strings.TrimSpace(string(r.Stdout)) == "lo"
			}},
			{"no docker socket", "test -e /var/run/docker.sock || test -e /run/docker.sock", func(r sandbox.Result) bool { return r.ExitCode == 1 }},
			{"no new privileges", "grep NoNewPrivs /proc/self/status", func(r sandbox.Result) bool {
				// gVisor does not report the field; runc must say 1.
				return r.ExitCode != 0 && rt != "runc" || strings.Fields(string(r.Stdout))[1] == "1"
			}},
			{"nofile limit", "ulimit -n", func(r sandbox.Result) bool {
				return strings.TrimSpace(string(r.Stdout)) == fmt.Sprint(sandbox.DefaultLimits().NoFile)
			}},
			{"tmp is small tmpfs", "df -B1 --output=size /tmp | tail -1", func(r sandbox.Result) bool {
				var n int64
				fmt.Sscan(string(r.Stdout), &n)
				return n > 0 && n <= sandbox.DefaultLimits().TmpBytes
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := e.run("probe", tt.script)
				if !tt.ok(r) {
					t.Errorf("%s: exit %d stdout %q stderr %q", tt.script, r.ExitCode, r.Stdout, r.Stderr)
				}
			})
		}
	})
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt, envOpts{})
		e.ensure("slow", sandbox.Limits{})
		start := time.Now()
		res, err := e.be.Exec(context.Background(), "slow", sh("(sleep 1000 &); sleep 1000", 2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if res.ExitCode != 124 || !res.TimedOut {
			t.Errorf("exit %d timed out %v, want 124", res.ExitCode, res.TimedOut)
		}
		if string(res.Stderr) != "Command timed out after 2s." && !strings.HasSuffix(string(res.Stderr), "\nCommand timed out after 2s.") {
			t.Errorf("stderr %q", res.Stderr)
		}
		if took < 2*time.Second || took > 6*time.Second {
			t.Errorf("took %v, want about 2s", took)
		}
		// The sandbox keeps answering and the background sleep is gone.
		r := e.run("slow", "pgrep -x sleep || echo none")
		if strings.TrimSpace(string(r.Stdout)) != "none" {
			t.Errorf("left-over sleep processes: %q", r.Stdout)
		}
	})
}

func TestForkBombContained(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt, envOpts{limits: sandbox.Limits{Pids: 128}})
		e.ensure("bomb", sandbox.Limits{})
		e.ensure("bystander", sandbox.Limits{})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		start := time.Now()
		res, err := e.be.Exec(ctx, "bomb", sh(`bomb() { bomb | bomb & }; bomb; sleep 3`, 8*time.Second))
		if err != nil && !errors.Is(err, sandbox.ErrUnavailable) {
			t.Fatalf("fork bomb: %v", err)
		}
		t.Logf("fork bomb ended after %v: exit %d, err %v", time.Since(start), res.ExitCode, err)
		if r := e.run("bystander", "echo alive"); strings.TrimSpace(string(r.Stdout)) != "alive" {
			t.Errorf("other sandbox: %q", r.Stdout)
		}
		// The bombed sandbox answers again (booted anew if it had to die).
		e.ensure("bomb", sandbox.Limits{})
		if r := e.run("bomb", "echo alive"); strings.TrimSpace(string(r.Stdout)) != "alive" {
			t.Errorf("bombed sandbox: %q", r.Stdout)
		}
	})
}

func TestMemoryHogReportedAsOOM(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt, envOpts{limits: sandbox.Limits{MemoryBytes: 192 << 20}})
		e.ensure("hog", sandbox.Limits{})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := e.be.Exec(ctx, "hog", sh(`python3 -c "
b = []
for i in range(64):
    b.append(bytearray(32 << 20))
print('survived')"`, 40*time.Second))
		switch {
		case err == nil:
			if !res.OOMKilled || res.ExitCode == 0 {
				t.Errorf("exit %d, OOMKilled %v, stdout %q stderr %q; want killed for memory", res.ExitCode, res.OOMKilled, res.Stdout, res.Stderr)
			}
		case errors.Is(err, sandbox.ErrUnavailable):
			// The whole sandbox went down (gVisor's kernel is in the cgroup).
			if !strings.Contains(err.Error(), "out of memory") {
				t.Errorf("sandbox died, but not reported as out of memory: %v", err)
			}
		default:
			t.Fatal(err)
		}
		e.ensure("hog", sandbox.Limits{})
		if r := e.run("hog", "echo alive"); strings.TrimSpace(string(r.Stdout)) != "alive" {
			t.Errorf("after the hog: %q", r.Stdout)
		}
	})
}

func TestDiskFillStopsAtQuota(t *testing.T) {
	if os.Getuid() != 0 {
		sandboxtest.Need(t, "the loop-mounted disk quota needs root")
	}
	forRuntimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt, envOpts{diskBytes: 64 << 20})
		e.ensure("fill", sandbox.Limits{})
		res := e.run("fill", "dd if=/dev/zero of=big bs=1M count=200 2>&1; echo; wc -c < big")
		out := string(res.Stdout)
		if !strings.Contains(out, "No space left on device") {
			t.Errorf("dd output %q: want ENOSPC", out)
		}
		lines := strings.Fields(out)
		var size int64
		fmt.Sscan(lines[len(lines)-1], &size)
		if size <= 0 || size > 64<<20 {
			t.Errorf("file size %d past a 64 MiB quota (output %q, stderr %q)", size, out, res.Stderr)
		}
		// Freeing space makes writes work again.
		if r := e.run("fill", "rm big && echo x > small && cat small"); strings.TrimSpace(string(r.Stdout)) != "x" {
			t.Errorf("after freeing: %q %q", r.Stdout, r.Stderr)
		}
	})
}

func TestFilesPersistAndStayApart(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		ctx := context.Background()
		e := newEnv(t, rt, envOpts{})
		e.ensure("a", sandbox.Limits{})
		e.ensure("b", sandbox.Limits{})
		e.run("a", "echo secret-a > note.txt && echo out > /mnt/user-data/outputs/o.txt")
		e.run("b", "echo secret-b > note.txt")

		// Two containers never see each other's files.
		if r := e.run("b", "cat note.txt; ls /mnt/user-data/outputs"); string(r.Stdout) != "secret-b\n" {
			t.Errorf("b sees %q", r.Stdout)
		}
		if r := e.run("b", "grep -rs secret-a / --include=note.txt -l 2>/dev/null | head -1"); len(bytes.TrimSpace(r.Stdout)) != 0 {
			t.Errorf("b reaches a's file at %q", r.Stdout)
		}

		// Idle shutdown (Stop) and a new boot keep the files.
		if err := e.be.Stop(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if st, err := e.be.Status(ctx, "a"); err != nil || st.State != sandbox.StateMissing {
			t.Errorf("status after stop = %+v, %v", st, err)
		}
		if _, err := e.be.Exec(ctx, "a", sh("true", time.Second)); !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("exec on a stopped sandbox: %v", err)
		}
		e.ensure("a", sandbox.Limits{})
		if r := e.run("a", "cat note.txt /mnt/user-data/outputs/o.txt"); string(r.Stdout) != "secret-a\nout\n" {
			t.Errorf("after restart a has %q %q", r.Stdout, r.Stderr)
		}

		// A threadbox restart: a new Backend adopts the running sandboxes.
		e.run("b", "echo before > live.txt")
		e.be.Close()
		be2 := e.reopen()
		e.be = be2
		adopted, removed, err := be2.Reconcile(ctx, adoptAll)
		if err != nil {
			t.Fatal(err)
		}
		if len(adopted) != 2 || len(removed) != 0 {
			t.Errorf("reconcile adopted %v removed %v, want a and b adopted", adopted, removed)
		}
		if r := e.run("b", "cat live.txt note.txt"); string(r.Stdout) != "before\nsecret-b\n" {
			t.Errorf("after threadbox restart b has %q %q", r.Stdout, r.Stderr)
		}
	})
}

func TestKilledMidCommandIsUnavailable(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		ctx := context.Background()
		e := newEnv(t, rt, envOpts{})
		e.ensure("victim", sandbox.Limits{})
		e.run("victim", "echo kept > kept.txt")
		errc := make(chan error, 1)
		go func() {
			_, err := e.be.Exec(ctx, "victim", sh("sleep 60", 120*time.Second))
			errc <- err
		}()
		time.Sleep(500 * time.Millisecond)
		if err := e.be.cli.ContainerKill(ctx, e.be.ContainerName("victim"), "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, sandbox.ErrUnavailable) {
				t.Fatalf("exec after kill: %v, want ErrUnavailable", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("exec hangs after the sandbox was killed")
		}
		e.ensure("victim", sandbox.Limits{})
		if r := e.run("victim", "cat kept.txt"); string(r.Stdout) != "kept\n" {
			t.Errorf("next command: %q %q", r.Stdout, r.Stderr)
		}
	})
}

func TestReconcileLeavesOthersAlone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "runc", envOpts{})
	// A stray container of this instance (as left by a crash) and two that
	// are not this instance's.
	mk := func(name string, labels map[string]string) string {
		c, err := e.be.cli.ContainerCreate(ctx, &container.Config{Image: DefaultImage, Cmd: []string{"sleep", "60"}, Labels: labels},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		sandboxtest.Cleanup(t, func() { e.be.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
		return c.ID
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	stray := mk("tb-stray-"+suffix, map[string]string{LabelManaged: "true", LabelInstance: e.cfg.Instance, LabelContainer: "stray"})
	other := mk("tb-other-"+suffix, map[string]string{LabelManaged: "true", LabelInstance: "someone-else", LabelContainer: "x"})
	plain := mk("tb-plain-"+suffix, nil)
	_, removed, err := e.be.Reconcile(ctx, adoptAll)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "stray" {
		t.Errorf("removed %v, want [stray]", removed)
	}
	if _, err := e.be.cli.ContainerInspect(ctx, stray); err == nil {
		t.Error("stray container still there")
	}
	for _, id := range []string{other, plain} {
		if _, err := e.be.cli.ContainerInspect(ctx, id); err != nil {
			t.Errorf("reconcile touched a foreign container: %v", err)
		}
	}

	// RemoveInstance takes a whole instance, running sandboxes too, and
	// nothing else.
	e.ensure("live", sandbox.Limits{})
	if err := RemoveInstance(ctx, e.cfg.Instance); err != nil {
		t.Fatal(err)
	}
	if _, err := e.be.cli.ContainerInspect(ctx, e.be.ContainerName("live")); err == nil {
		t.Error("RemoveInstance left a sandbox of its instance")
	}
	for _, id := range []string{other, plain} {
		if _, err := e.be.cli.ContainerInspect(ctx, id); err != nil {
			t.Errorf("RemoveInstance touched a foreign container: %v", err)
		}
	}
}

// TestAgentSocket: under runc the agent talks over its own unix socket. The
// socket's folder is read-only in the sandbox and empty once the agent is
// connected; after a threadbox restart a process of the sandbox that races
// the agent to the new socket is refused and the agent is adopted.
func TestAgentSocket(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, DefaultRuntime, envOpts{})
	e.ensure("a", sandbox.Limits{})
	r := e.run("a", `ls -A `+SocketMount+`; touch `+SocketMount+`/x 2>&1; echo "dial=$THREADBOX_AGENT_DIAL"`)
	if out := string(r.Stdout); !strings.Contains(out, "Read-only file system") || strings.Contains(out, socketName) || !strings.HasSuffix(out, "dial=\n") {
		t.Fatalf("socket folder from inside: %q", out)
	}
	if st := e.be.boxes.Get("a"); st == nil {
		t.Fatal("no live box")
	} else if _, ok := st.conn.(closers); !ok {
		t.Fatalf("agent connection is %T, want the socket", st.conn)
	}

	// An impostor in its own session (so it outlives its command) dials
	// the agent's socket every millisecond and counts its connections; the
	// file holds 0 once it runs.
	imp := `import socket, time
n = 0
open("/tmp/impostor", "w").write(str(n))
while True:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("` + SocketMount + "/" + socketName + `")
        n += 1
        open("/tmp/impostor", "w").write(str(n))
        s.recv(1)
    except OSError:
        pass
    s.close()
    time.sleep(0.001)
`
	r = e.run("a", "printf '%s' '"+imp+"' > /tmp/imp.py && (setsid python3 /tmp/imp.py </dev/null >/dev/null 2>&1 &)"+
		"; for i in $(seq 200); do [ -e /tmp/impostor ] && break; sleep 0.05; done; cat /tmp/impostor")
	if string(r.Stdout) != "0" {
		t.Fatalf("impostor did not start: %q %q", r.Stdout, r.Stderr)
	}

	// Restart threadbox. The impostor dials every millisecond, the agent
	// (after its backoff has grown) every 250 ms: the impostor reaches the
	// new socket first, nearly always, and is refused, or the agent would not
	// be adopted. A restart where the agent happened to dial first is
	// repeated, so the refusal is always tested.
	var n string
	for try := 0; try < 5 && (n == "" || n == "0"); try++ {
		e.be.Close()
		time.Sleep(600 * time.Millisecond)
		be2 := e.reopen()
		e.be = be2
		adopted, _, err := be2.Reconcile(ctx, adoptAll)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(adopted, "a") {
			t.Fatalf("adopted %v, want a", adopted)
		}
		r = e.run("a", "cat /tmp/impostor; echo; echo alive")
		if !strings.HasSuffix(string(r.Stdout), "alive\n") {
			t.Fatalf("after adoption: %q %q", r.Stdout, r.Stderr)
		}
		n = strings.TrimSpace(strings.TrimSuffix(string(r.Stdout), "alive\n"))
		if n == "0" {
			t.Logf("restart %d: the agent dialled first", try+1)
		}
	}
	if n == "" || n == "0" {
		t.Errorf("the impostor never reached the socket in five restarts (%q): the refusal went untested", n)
	}
}

// adoptAll is the verdict of an owner whose records claim every sandbox.
func adoptAll(string) sandbox.Verdict { return sandbox.Adopt }

// TestAvailableSaysWhy: each missing prerequisite of a sandbox makes the
// backend unavailable with a reason naming it.
func TestAvailableSaysWhy(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		host   string // empty: the daemon of the environment
		cfg    Config
		reason string
	}{
		{"no daemon", "unix:///nonexistent/threadbox-test/docker.sock", Config{AgentBin: agent}, "docker: daemon"},
		{"no agent binary", "", Config{AgentBin: "/nonexistent/threadbox-agent"}, "docker: agent binary"},
		{"agent not executable", "", Config{AgentBin: notExec}, "is not executable"},
		{"agent unset", "", Config{}, "docker: no agent binary"},
		{"runtime not registered", "", Config{AgentBin: agent, Runtime: "threadbox-no-such-runtime"}, `runtime "threadbox-no-such-runtime" is not registered`},
		{"no image", "", Config{AgentBin: agent, Image: "threadbox-no-such-image:none"}, "docker: image threadbox-no-such-image:none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
			if tt.host != "" {
				opts = append(opts, client.WithHost(tt.host))
			}
			cli, err := client.NewClientWithOpts(opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tt.host == "" {
				if _, err := cli.Ping(ctx); err != nil {
					cli.Close()
					sandboxtest.Need(t, "docker daemon not reachable (scripts/ci-docker.sh starts it): %v", err)
				}
			}
			be := NewWithClient(cli, tt.cfg)
			defer be.Close()
			err = be.Available(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Available: %v, want a reason naming %q", err, tt.reason)
			}
		})
	}
}

// TestEngineExecAndInstances covers what the benchmark asks of the Docker
// SDK through this package: an exec through the Engine API, bypassing the
// agent, and the instances that have sandboxes.
func TestEngineExecAndInstances(t *testing.T) {
	e := newEnv(t, DefaultRuntime, envOpts{})
	e.ensure("engine", sandbox.Limits{})
	ctx := context.Background()
	code, err := e.be.EngineExec(ctx, "engine", "sh", "-c", "exit 3")
	if err != nil || code != 3 {
		t.Errorf("EngineExec: %d %v, want exit code 3", code, err)
	}
	if _, err := e.be.EngineExec(ctx, "no-such-sandbox", "true"); err == nil {
		t.Error("EngineExec in a missing sandbox succeeded")
	}
	got, err := Instances(ctx)
	if err != nil || !slices.Contains(got, e.cfg.Instance) {
		t.Errorf("Instances: %q %v, want it to hold %q", got, err, e.cfg.Instance)
	}
	if n, err := CountInstance(ctx, e.cfg.Instance); err != nil || n != 1 {
		t.Errorf("CountInstance: %d %v, want 1", n, err)
	}
}

// TestCPUBandwidthPeriod: the CPU limit is enforced over 10 ms periods (not
// the kernel's 100 ms), so a sandbox that spent its quota waits a few
// milliseconds, not tens of them, and the quota is the same share.
func TestCPUBandwidthPeriod(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt, envOpts{limits: sandbox.Limits{CPUs: 0.5}})
		e.ensure("cpu", sandbox.Limits{})
		info, err := e.be.cli.ContainerInspect(context.Background(), e.be.ContainerName("cpu"))
		if err != nil {
			t.Fatal(err)
		}
		if p, q := info.HostConfig.CPUPeriod, info.HostConfig.CPUQuota; p != 10000 || q != 5000 {
			t.Errorf("container CPU period %d µs, quota %d µs; want 10000 and 5000", p, q)
		}
		// What the kernel enforces, from the container's cgroup on the host.
		files := map[string]string{
			"/sys/fs/cgroup/cpu/docker/" + info.ID + "/cpu.cfs_period_us":      "10000",
			"/sys/fs/cgroup/cpu/docker/" + info.ID + "/cpu.cfs_quota_us":       "5000",
			"/sys/fs/cgroup/docker/" + info.ID + "/cpu.max":                    "5000 10000",
			"/sys/fs/cgroup/system.slice/docker-" + info.ID + ".scope/cpu.max": "5000 10000",
		}
		found := 0
		for f, want := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			found++
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("%s = %q, want %q", f, got, want)
			}
		}
		if found == 0 {
			if os.Getenv("CI") == "true" {
				t.Fatalf("no cgroup file of container %s found on the host (looked for %v)", info.ID, files)
			}
			t.Logf("no cgroup file of container %s found on this host; checked the container's settings only", info.ID)
		}
	})
}

// TestAdoptedSandboxKeepsItsSessions: a threadbox restart leaves a runc
// sandbox running; the new backend adopts it and attaches, by tag, to the
// session the old one started, which answers its input with its earlier
// output counted, while the old backend's untagged command is gone.
func TestAdoptedSandboxKeepsItsSessions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "runc", envOpts{})
	e.ensure("kept", sandbox.Limits{})
	var mu sync.Mutex
	var got bytes.Buffer
	output := func(_ sandbox.Stream, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		got.Write(b)
	}
	seen := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			s := got.String()
			mu.Unlock()
			if strings.Contains(s, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("session output %q, want %q", s, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cmd := sandbox.Command{Args: []string{"sh", "-c", "echo ready; while read l; do echo got $l; done"}, Tag: "terminal:kept", Output: output}
	if _, err := e.be.Start(ctx, "kept", cmd, nil); err != nil {
		t.Fatal(err)
	}
	seen("ready\n")
	go func() { _, _ = e.be.Exec(ctx, "kept", sh("sleep 300", 10*time.Minute)) }()
	time.Sleep(300 * time.Millisecond)
	e.be.Close()

	be2 := e.reopen()
	e.be = be2
	if adopted, _, err := be2.Reconcile(ctx, adoptAll); err != nil || len(adopted) != 1 {
		t.Fatalf("reconcile adopted %v: %v", adopted, err)
	}
	mu.Lock()
	got.Reset()
	mu.Unlock()
	attached, err := be2.Start(ctx, "kept", sandbox.Command{Tag: "terminal:kept", Attach: true, Output: output}, nil)
	if err != nil {
		t.Fatalf("attach to the session after the restart: %v", err)
	}
	if attached.Offset() != int64(len("ready\n")) {
		t.Errorf("offset %d, want the %d bytes written before", attached.Offset(), len("ready\n"))
	}
	if _, err := attached.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	seen("got x\n")
	if r := e.run("kept", "pgrep -x sleep || echo none"); strings.TrimSpace(string(r.Stdout)) != "none" {
		t.Errorf("the old backend's untagged command still runs: %q", r.Stdout)
	}
	_ = attached.Kill()
}

// TestNoDaemonNetwork: a sandbox with an agent socket is created with
// networking disabled, so the daemon builds no network sandbox for it
// (no network namespace of its own to hand over at start); inside, it still
// has a network namespace with only its loopback, up, and localhost
// resolves from the /etc/hosts bound read-only from the socket folder (its
// mount says ro: the sandbox user could not write a root file anyway).
func TestNoDaemonNetwork(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, DefaultRuntime, envOpts{})
	e.ensure("n", sandbox.Limits{})
	in, err := e.be.cli.ContainerInspect(ctx, e.be.ContainerName("n"))
	if err != nil {
		t.Fatal(err)
	}
	if !in.Config.NetworkDisabled || in.HostConfig.NetworkMode != "none" {
		t.Errorf("NetworkDisabled %v, NetworkMode %q: want true and none", in.Config.NetworkDisabled, in.HostConfig.NetworkMode)
	}
	if in.NetworkSettings != nil && in.NetworkSettings.SandboxKey != "" {
		t.Errorf("the daemon made a network sandbox: %s", in.NetworkSettings.SandboxKey)
	}
	script := `import socket
print(" ".join(n for _, n in socket.if_nameindex()), int(open("/sys/class/net/lo/flags").read(), 16) & 1)
s = socket.create_server(("localhost", 0))
c = socket.create_connection(("localhost", s.getsockname()[1]))
print("localhost", c.getpeername()[0])
`
	r := e.run("n", "python3 -c '"+script+"' && awk '$5 == \"/etc/hosts\" { split($6, o, \",\"); print \"hosts\", o[1] }' /proc/self/mountinfo")
	want := "lo 1\nlocalhost 127.0.0.1\nhosts ro\n"
	if string(r.Stdout) != want {
		t.Errorf("inside: %q %q, want %q", r.Stdout, r.Stderr, want)
	}
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.run("n", "readlink /proc/self/ns/net"); strings.TrimSpace(string(r.Stdout)) == host {
		t.Errorf("the sandbox shares the host's network namespace %s", host)
	}
}
