// Package sandboxtest is the conformance suite every sandbox backend passes:
// one set of tests of the sandbox's folders, commands and limits
// (docs/api.md) run against a sandbox.Backend
// (docker with runc, docker with runsc, local). Backends differ only where
// Capabilities says so: which limits they enforce on the running host.
//
// The suite owns the containers' host folders: it lays them out with
// infra/hostdirs in a data folder of its own (loop-mounted disk quotas when
// the backend enforces disk) and hands every sandbox explicit mounts, so
// backends under test need no Dirs of their own.
package sandboxtest

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
	"syscall"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
)

// MemoryEnforcement says what happens to a command that goes past the
// sandbox's memory limit.
type MemoryEnforcement int

// The memory enforcements.
const (
	// MemoryNone: no memory limit; the memory case is not run.
	MemoryNone MemoryEnforcement = iota
	// MemoryOOMKill: a cgroup limit; the command is killed and the result
	// says OOMKilled (or the whole sandbox dies of it, reported as out of
	// memory).
	MemoryOOMKill
	// MemoryAllocFails: an address-space rlimit; the allocation fails and
	// the command exits non-zero.
	MemoryAllocFails
)

// String names the enforcement.
func (m MemoryEnforcement) String() string {
	switch m {
	case MemoryOOMKill:
		return "oom-kill"
	case MemoryAllocFails:
		return "alloc-fails"
	default:
		return "none"
	}
}

// Capabilities is the one explicit place where backends may differ: the
// limits the backend enforces on this host. Every other test is the same
// for every backend.
type Capabilities struct {
	Memory MemoryEnforcement
	// Disk: writes stop at the container's disk quota (hostdirs' loop
	// quota, which needs root).
	Disk bool
	// Pids: a per-sandbox process limit contains a fork bomb.
	Pids bool
	// CPU: the backend reads a sandbox's CPU time from its control group
	// (SandboxCPU; sandbox time metering).
	CPU bool
	// CommandTimeout bounds each of the suite's probe commands; zero is
	// 30 s. A backend whose CPU is emulated (a microVM without KVM runs
	// code tens of times slower) needs longer for the same probes.
	CommandTimeout time.Duration
}

// cpuMeter is a backend that reads a sandbox's CPU time (app/containers
// meters sandbox time with it).
type cpuMeter interface {
	SandboxCPU(ctx context.Context, id string) (time.Duration, error)
}

// Limits the suite's sandboxes run with.
const (
	MemoryBytes = int64(512 << 20)
	HogMemory   = int64(192 << 20)
	// Pids leaves room for gVisor, whose sentry threads count in the
	// sandbox's pids cgroup.
	Pids      = int64(512)
	DiskBytes = int64(64 << 20)
	MaxOutput = 1000
)

// suite is one run against one backend.
type suite struct {
	newBackend func(t *testing.T) sandbox.Backend
	caps       Capabilities
	data       string
	dirs       *hostdirs.Layout
	be         sandbox.Backend

	mu   sync.Mutex
	used map[string]bool
}

// Run runs the conformance suite against the backends newBackend returns.
// newBackend is called once for the suite and again where a test needs a
// fresh backend instance (as after a server restart); every instance must
// serve the same sandboxes and clean up after itself (Cleanup, so that a
// run that times out removes them too).
func Run(t *testing.T, newBackend func(t *testing.T) sandbox.Backend, caps Capabilities) {
	RunCases(t, newBackend, caps, Cases()...)
}

// Cases names the suite's cases in the order Run runs them.
func Cases() []string {
	return []string{"Layout", "BashSemantics", "Timeout", "OutputCaps", "OutputDir", "Persistence", "KilledMidCommand",
		"Isolation", "AgentUnreachable", "ForkBomb", "OutputFlood", "MemoryHog", "DiskFill", "CPUAccounting"}
}

// RunCases runs the named cases of the suite (Cases), in the suite's
// order: for a backend whose sandboxes boot slowly on some hosts (a
// microVM under emulation), a part of the suite there and the whole where
// they boot fast. An unknown name fails the test.
func RunCases(t *testing.T, newBackend func(t *testing.T) sandbox.Backend, caps Capabilities, names ...string) {
	s := newSuite(t, newBackend, caps)
	t.Logf("backend %s enforces: memory %s, disk %v, pids %v; cpu accounting %v", s.be.Name(), caps.Memory, caps.Disk, caps.Pids, caps.CPU)
	cases := map[string]func(*testing.T){
		"Layout": s.testLayout, "BashSemantics": s.testBashSemantics, "Timeout": s.testTimeout, "OutputCaps": s.testOutputCaps,
		"OutputDir": s.testOutputDir, "Persistence": s.testPersistence, "KilledMidCommand": s.testKilledMidCommand,
		"Isolation": s.testIsolation, "AgentUnreachable": s.testAgentUnreachable, "ForkBomb": s.testForkBomb,
		"OutputFlood": s.testOutputFlood, "MemoryHog": s.testMemoryHog, "DiskFill": s.testDiskFill, "CPUAccounting": s.testCPUAccounting,
	}
	for _, n := range names {
		if cases[n] == nil {
			t.Fatalf("sandboxtest: no case %q", n)
		}
	}
	for _, n := range Cases() {
		if slices.Contains(names, n) {
			t.Run(n, cases[n])
		}
	}
}

func newSuite(t *testing.T, newBackend func(t *testing.T) sandbox.Backend, caps Capabilities) *suite {
	t.Helper()
	quota := hostdirs.QuotaNone
	if caps.Disk {
		if os.Geteuid() != 0 {
			t.Fatal("sandboxtest: Capabilities.Disk needs root for the loop-mounted quota")
		}
		quota = hostdirs.QuotaLoop
	}
	// Bubblewrap jails run as an unprivileged host user: every folder on
	// the way to the mounts must be traversable.
	data, err := os.MkdirTemp("", "threadbox-sandboxtest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &suite{
		newBackend: newBackend,
		caps:       caps,
		data:       data,
		dirs:       hostdirs.New(data, hostdirs.Options{Quota: quota, DiskBytes: DiskBytes}),
		used:       map[string]bool{},
	}
	Cleanup(t, func() {
		ctx := context.Background()
		s.mu.Lock()
		defer s.mu.Unlock()
		for id := range s.used {
			_ = s.dirs.Remove(ctx, id)
		}
		_ = os.RemoveAll(data)
	})
	s.be = newBackend(t)
	Cleanup(t, func() {
		ctx := context.Background()
		s.mu.Lock()
		defer s.mu.Unlock()
		for id := range s.used {
			_ = s.be.Remove(ctx, id)
		}
	})
	return s
}

// spec prepares the host folders of id and returns its sandbox spec.
func (s *suite) spec(t *testing.T, id string, l sandbox.Limits) sandbox.Spec {
	t.Helper()
	s.mu.Lock()
	s.used[id] = true
	s.mu.Unlock()
	d, err := s.dirs.Prepare(context.Background(), id)
	if err != nil {
		t.Fatalf("prepare %s: %v", id, err)
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = MemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = Pids
	}
	return sandbox.Spec{ID: id, Mounts: d.Mounts(), Limits: l, Env: []string{"SPEC_ENV=from spec"}}
}

// boot ensures the sandbox id on be.
func (s *suite) boot(t *testing.T, be sandbox.Backend, id string, l sandbox.Limits) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := be.Ensure(ctx, s.spec(t, id, l)); err != nil {
		t.Fatalf("ensure %s: %v", id, err)
	}
}

// uniq returns a container id unique to this test.
func uniq(name string) string {
	return fmt.Sprintf("st-%s-%d", name, time.Now().UnixNano()%1e9)
}

// Sh is the command the bash tool sends for script.
func Sh(script string, timeout time.Duration) sandbox.Command {
	return sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: timeout}
}

func (s *suite) exec(t *testing.T, be sandbox.Backend, id string, cmd sandbox.Command) (sandbox.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), max(90*time.Second, s.probeTimeout()+time.Minute, cmd.Timeout+time.Minute))
	defer cancel()
	return be.Exec(ctx, id, cmd)
}

// secretSearch looks for the file secret-of-a.txt, which another sandbox
// wrote, over the whole root filesystem and the container's folders; it
// prints only "end" when the file is nowhere.
const secretSearch = "find / -xdev -name secret-of-a.txt 2>/dev/null; find /home /mnt /tmp -name secret-of-a.txt 2>/dev/null; echo end"

// walkTimeout bounds secretSearch, which walks the whole root filesystem:
// that took over 20 s under gVisor while other suites kept both CPUs busy.
const walkTimeout = 90 * time.Second

// probeTimeout is how long one of the suite's probe commands may take.
func (s *suite) probeTimeout() time.Duration {
	if s.caps.CommandTimeout > 0 {
		return s.caps.CommandTimeout
	}
	return 30 * time.Second
}

// run runs script in id and fails the test when it cannot run.
func (s *suite) run(t *testing.T, id, script string) sandbox.Result {
	t.Helper()
	res, err := s.exec(t, s.be, id, Sh(script, s.probeTimeout()))
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return res
}

func out(r sandbox.Result) string { return strings.TrimSpace(string(r.Stdout)) }

func (s *suite) testLayout(t *testing.T) {
	id := uniq("layout")
	s.boot(t, s.be, id, sandbox.Limits{})
	d := s.dirs.Dirs(id)
	if err := os.WriteFile(filepath.Join(d.Uploads, "in.csv"), []byte("a,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d.Skills, "pdf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Skills, "pdf", "SKILL.md"), []byte("# pdf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, script, want string
	}{
		{"working directory", "pwd", sandbox.WorkspaceDir},
		{"sandbox user", "id -u; id -g", "1000\n1000"},
		{"home", "echo $HOME", "/home/agent"},
		{"upload readable", "cat /mnt/user-data/uploads/in.csv", "a,b"},
		{"skill readable", "cat /mnt/skills/pdf/SKILL.md", "# pdf"},
		{"workspace writable", "echo w > /home/agent/workspace/w && cat w", "w"},
		{"outputs writable", "echo o > /mnt/user-data/outputs/o && cat /mnt/user-data/outputs/o", "o"},
		{"tmp writable", "echo t > /tmp/t && cat /tmp/t", "t"},
		{"uploads read-only", "touch /mnt/user-data/uploads/x 2>/dev/null; echo $?; test -e /mnt/user-data/uploads/x || echo absent", "1\nabsent"},
		{"list a folder", "ls /mnt/user-data/uploads /mnt/skills", "/mnt/skills:\npdf\n\n/mnt/user-data/uploads:\nin.csv"},
		{"skills read-only", "mkdir /mnt/skills/x 2>/dev/null; echo $?", "1"},
		{"etc read-only", "touch /etc/x 2>/dev/null; echo $?", "1"},
		{"root read-only", "mkdir /x 2>/dev/null; echo $?", "1"},
		{"python", "python3 -c 'import pandas, numpy; print(1)'", "1"},
		{"tools", "command -v unzip 7z bc rg fd sqlite3 | wc -l", "6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.run(t, id, tt.script)
			if out(r) != tt.want {
				t.Errorf("%s: stdout %q (exit %d, stderr %q), want %q", tt.script, r.Stdout, r.ExitCode, r.Stderr, tt.want)
			}
		})
	}
	// Files the sandbox writes are the sandbox user's on the host too.
	fi, err := os.Stat(filepath.Join(d.Workspace, "w"))
	if err != nil {
		t.Fatalf("workspace file not on the host: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Workspace, "w")); string(b) != "w\n" {
		t.Errorf("host sees %q", b)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && st.Uid != hostdirs.SandboxUID {
		t.Errorf("workspace file owned by host uid %d, want %d", st.Uid, hostdirs.SandboxUID)
	}
}

func (s *suite) testBashSemantics(t *testing.T) {
	id := uniq("bash")
	s.boot(t, s.be, id, sandbox.Limits{})
	r := s.run(t, id, "cd /tmp && export FOO=bar && echo kept > /home/agent/workspace/f && echo $FOO $(pwd)")
	if out(r) != "bar /tmp" {
		t.Fatalf("first call: %q", r.Stdout)
	}
	r = s.run(t, id, `echo "${FOO:-unset} $(pwd) $(cat f)"`)
	if out(r) != "unset "+sandbox.WorkspaceDir+" kept" {
		t.Errorf("second call: %q, want a new shell in the workspace with the file kept", r.Stdout)
	}
	r = s.run(t, id, "echo out; echo err >&2; exit 3")
	if r.ExitCode != 3 || out(r) != "out" || strings.TrimSpace(string(r.Stderr)) != "err" {
		t.Errorf("exit %d stdout %q stderr %q, want 3 out err", r.ExitCode, r.Stdout, r.Stderr)
	}
	res, err := s.exec(t, s.be, id, sandbox.Command{Args: []string{"bash", "-c", "cat; echo $EXTRA; echo $SPEC_ENV"}, Stdin: []byte("in\n"), Env: []string{"EXTRA=x"}})
	if err != nil || string(res.Stdout) != "in\nx\nfrom spec\n" {
		t.Errorf("stdin and env: %q %v", res.Stdout, err)
	}
}

func (s *suite) testTimeout(t *testing.T) {
	id := uniq("timeout")
	s.boot(t, s.be, id, sandbox.Limits{})
	// The limit leaves the shell time to start and print first: 2 s, and
	// 10 s where the CPU is emulated (its probes are given longer), where
	// a shell on a busy host took more than 2 s to print.
	limit := 2 * time.Second
	if s.probeTimeout() > 30*time.Second {
		limit = 10 * time.Second
	}
	start := time.Now()
	res, err := s.exec(t, s.be, id, Sh("echo before; sleep 1000 & sleep 1000", limit))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if res.ExitCode != 124 || !res.TimedOut {
		t.Errorf("exit %d timed out %v, want 124", res.ExitCode, res.TimedOut)
	}
	note := fmt.Sprintf("Command timed out after %ds.", int(limit.Seconds()))
	if msg := string(res.Stderr); msg != note && !strings.HasSuffix(msg, "\n"+note) {
		t.Errorf("stderr %q, want it to end with %q", msg, note)
	}
	if out(res) != "before" {
		t.Errorf("output before the timeout lost: %q", res.Stdout)
	}
	if took < limit || took > limit+6*time.Second {
		t.Errorf("took %v, want about %v", took, limit)
	}
	if r := s.run(t, id, "pgrep -x sleep || echo none"); out(r) != "none" {
		t.Errorf("background children left: %q", r.Stdout)
	}
}

func (s *suite) testOutputCaps(t *testing.T) {
	id := uniq("caps")
	s.boot(t, s.be, id, sandbox.Limits{})
	const marker = "...[truncated]"
	tests := []struct {
		name      string
		script    string
		n         int
		truncated bool
	}{
		{"cap-1", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", MaxOutput-1), MaxOutput - 1, false},
		{"cap", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", MaxOutput), MaxOutput, false},
		{"cap+1", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", MaxOutput+1), MaxOutput, true},
		{"1-byte writes", fmt.Sprintf("for i in $(seq %d); do printf a; done", MaxOutput+50), MaxOutput, true},
	}
	for _, tt := range tests {
		for _, stream := range []string{"stdout", "stderr"} {
			t.Run(tt.name+"/"+stream, func(t *testing.T) {
				script := tt.script
				if stream == "stderr" {
					script = "{ " + script + "; } >&2"
				}
				cmd := Sh(script, s.probeTimeout())
				cmd.MaxOutput = MaxOutput
				res, err := s.exec(t, s.be, id, cmd)
				if err != nil {
					t.Fatal(err)
				}
				got, trunc := res.Stdout, res.StdoutTruncated
				if stream == "stderr" {
					got, trunc = res.Stderr, res.StderrTruncated
				}
				want := strings.Repeat("a", tt.n)
				if tt.truncated {
					want += marker
				}
				if string(got) != want || trunc != tt.truncated {
					t.Errorf("got %d bytes (suffix %q), truncated %v; want %d bytes, truncated %v",
						len(got), got[max(0, len(got)-20):], trunc, len(want), tt.truncated)
				}
			})
		}
	}
}

func (s *suite) testOutputDir(t *testing.T) {
	id := uniq("outdir")
	s.boot(t, s.be, id, sandbox.Limits{})
	cmd := Sh(`test -d "$OUTPUT_DIR" && test -z "$(find "$OUTPUT_DIR" -mindepth 1)" || exit 9
echo chart > "$OUTPUT_DIR/chart.txt"; mkdir "$OUTPUT_DIR/sub"; echo deep > "$OUTPUT_DIR/sub/x"`, s.probeTimeout())
	cmd.OutputDir = true
	res, err := s.exec(t, s.be, id, cmd)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d err %v stderr %q", res.ExitCode, err, res.Stderr)
	}
	want := []string{sandbox.OutputsDir + "/chart.txt"}
	if !slices.Equal(res.OutputFiles, want) {
		t.Errorf("output files %q, want %q (top-level regular files only)", res.OutputFiles, want)
	}
	b, err := os.ReadFile(filepath.Join(s.dirs.Dirs(id).Outputs, "chart.txt"))
	if err != nil || string(b) != "chart\n" {
		t.Errorf("host outputs/chart.txt: %q %v", b, err)
	}
	// The next call gets a fresh, empty folder.
	cmd = Sh(`test -d "$OUTPUT_DIR" && find "$OUTPUT_DIR" -mindepth 1 | wc -l`, s.probeTimeout())
	cmd.OutputDir = true
	if res, err := s.exec(t, s.be, id, cmd); err != nil || out(res) != "0" || len(res.OutputFiles) != 0 {
		t.Errorf("second call: %q %v %v", res.Stdout, res.OutputFiles, err)
	}
}

func (s *suite) testPersistence(t *testing.T) {
	ctx := context.Background()
	id := uniq("persist")
	s.boot(t, s.be, id, sandbox.Limits{})
	s.run(t, id, "echo one > keep.txt; mkdir -p sub && echo two > sub/deep.txt; (sleep 1000 &) ; true")
	if err := s.be.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if st, err := s.be.Status(ctx, id); err != nil || st.State == sandbox.StateRunning {
		t.Errorf("status after stop: %+v %v", st, err)
	}
	if _, err := s.exec(t, s.be, id, Sh("true", time.Second)); !errors.Is(err, sandbox.ErrUnavailable) && !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("exec on a stopped sandbox: %v, want unavailable or not found", err)
	}
	s.boot(t, s.be, id, sandbox.Limits{})
	if st, err := s.be.Status(ctx, id); err != nil || st.State != sandbox.StateRunning {
		t.Errorf("status after boot: %+v %v", st, err)
	}
	r := s.run(t, id, "cat keep.txt sub/deep.txt; pgrep -x sleep || echo no-processes")
	if out(r) != "one\ntwo\nno-processes" {
		t.Errorf("after restart: %q, want files kept and processes gone", r.Stdout)
	}
	if err := s.be.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A new backend instance (a server restart) serves the same files.
	be2 := s.newBackend(t)
	s.boot(t, be2, id, sandbox.Limits{})
	res, err := s.exec(t, be2, id, Sh("cat keep.txt", 10*time.Second))
	if err != nil || out(res) != "one" {
		t.Errorf("new backend instance: %q %v", res.Stdout, err)
	}
	if err := be2.Stop(ctx, id); err != nil {
		t.Error(err)
	}
}

func (s *suite) testKilledMidCommand(t *testing.T) {
	ctx := context.Background()
	id := uniq("killed")
	s.boot(t, s.be, id, sandbox.Limits{})
	errc := make(chan error, 1)
	go func() {
		_, err := s.be.Exec(ctx, id, Sh("sleep 60", 90*time.Second))
		errc <- err
	}()
	time.Sleep(time.Second)
	if err := s.be.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("pending exec: %v, want sandbox.ErrUnavailable", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("pending exec did not return after stop")
	}
	s.boot(t, s.be, id, sandbox.Limits{})
	if r := s.run(t, id, "echo again"); out(r) != "again" {
		t.Errorf("after reboot: %q", r.Stdout)
	}
}

func (s *suite) testIsolation(t *testing.T) {
	a, b := uniq("iso-a"), uniq("iso-b")
	s.boot(t, s.be, a, sandbox.Limits{})
	s.boot(t, s.be, b, sandbox.Limits{})
	s.run(t, a, "echo secret > secret-of-a.txt; sleep 300 >/dev/null 2>&1 &")
	tests := []struct {
		name   string
		script string
		ok     func(r sandbox.Result) bool
	}{
		{"only loopback", `python3 -c "import socket; print(' '.join(n for _, n in socket.if_nameindex()))"`,
			func(r sandbox.Result) bool { return out(r) == "lo" }},
		{"no route out", `python3 -c "
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(('1.1.1.1', 53)); print('connected')
except OSError:
    print('refused')"`, func(r sandbox.Result) bool { return out(r) == "refused" }},
		{"no capabilities", "grep CapEff /proc/self/status", func(r sandbox.Result) bool {
			f := strings.Fields(out(r))
			return len(f) == 2 && f[1] == "0000000000000000"
		}},
		{"not root", "id -u", func(r sandbox.Result) bool { return out(r) != "0" && out(r) != "" }},
		{"uploads read-only", "touch /mnt/user-data/uploads/x", func(r sandbox.Result) bool { return r.ExitCode != 0 }},
		{"skills read-only", "touch /mnt/skills/x", func(r sandbox.Result) bool { return r.ExitCode != 0 }},
		{"etc not writable", "echo x >> /etc/passwd", func(r sandbox.Result) bool { return r.ExitCode != 0 }},
		{"other container's files invisible", secretSearch,
			func(r sandbox.Result) bool { return out(r) == "end" }},
		{"other container's processes invisible", "pgrep -x sleep || echo none", func(r sandbox.Result) bool { return out(r) == "none" }},
		{"host data folder invisible", "test -e " + s.data + " && echo visible || echo invisible", func(r sandbox.Result) bool { return out(r) == "invisible" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := Sh(tt.script, s.probeTimeout())
			if tt.script == secretSearch {
				cmd.Timeout = max(cmd.Timeout, walkTimeout)
			}
			r, err := s.exec(t, s.be, b, cmd)
			if err != nil {
				t.Fatalf("exec %q in %s: %v", tt.script, b, err)
			}
			if !tt.ok(r) {
				t.Errorf("%s: exit %d stdout %q stderr %q", tt.script, r.ExitCode, r.Stdout, r.Stderr)
			}
		})
	}
}

// agentProbe finds the agent among the sandbox's processes, tries to open
// its descriptors and memory, and sends it every signal that
// could stop it; it prints the agent's pid and what got through.
const agentProbe = `
import os, signal, time
agent = [int(p) for p in os.listdir("/proc") if p.isdigit() and b"/opt/threadbox/agent" in open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[0]]
if len(agent) != 1:
    print("agents", agent); raise SystemExit(1)
pid, got = agent[0], []
def opens(path, flags):
    try:
        os.close(os.open(path, flags)); return True
    except OSError:
        return False
# A descriptor counts when it opens through /proc and is not a file the
# code could open by its path anyway (/dev/null, a world-readable file):
# pipes and sockets, such as the channel of the agent to the host.
for fd in range(64):
    for flags in (os.O_WRONLY, os.O_RDONLY):
        path = "/proc/%d/fd/%d" % (pid, fd)
        if opens(path, flags):
            target = os.readlink(path)
            if not (target.startswith("/") and opens(target, flags)):
                got.append("fd%d:%s" % (fd, target))
if opens("/proc/%d/mem" % pid, os.O_RDONLY):
    got.append("mem")
for sig in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGABRT", "SIGALRM", "SIGSEGV", "SIGSTOP", "SIGKILL"):
    try:
        os.kill(pid, getattr(signal, sig))
    except OSError:
        pass
    time.sleep(0.05)
print(pid, " ".join(got) or "nothing")
`

// testAgentUnreachable: code in the sandbox cannot open the agent's
// descriptors (its channel to the host), read its memory, or stop it with
// a signal.
func (s *suite) testAgentUnreachable(t *testing.T) {
	id := uniq("agent")
	s.boot(t, s.be, id, sandbox.Limits{})
	r := s.run(t, id, "python3 -c '"+agentProbe+"'")
	f := strings.Fields(out(r))
	if r.ExitCode != 0 || len(f) != 2 || f[1] != "nothing" {
		t.Fatalf("probing the agent: exit %d stdout %q stderr %q (want its pid and \"nothing\")", r.ExitCode, r.Stdout, r.Stderr)
	}
	time.Sleep(500 * time.Millisecond)
	if r := s.run(t, id, "cat /proc/"+f[0]+"/cmdline | tr '\\0' ' '"); !strings.Contains(out(r), "/opt/threadbox/agent") {
		t.Fatalf("after the signals the agent is gone or replaced: %q", r.Stdout)
	}
}

func (s *suite) testForkBomb(t *testing.T) {
	if !s.caps.Pids {
		t.Skip("backend enforces no per-sandbox process limit (Capabilities.Pids)")
	}
	bomb, bystander := uniq("bomb"), uniq("bystander")
	s.boot(t, s.be, bomb, sandbox.Limits{})
	s.boot(t, s.be, bystander, sandbox.Limits{})
	done := make(chan error, 1)
	go func() {
		_, err := s.exec(t, s.be, bomb, Sh(`bomb() { bomb | bomb & }; bomb; sleep 5`, 10*time.Second))
		done <- err
	}()
	time.Sleep(2 * time.Second)
	start := time.Now()
	res, err := s.exec(t, s.be, bystander, Sh("echo alive", 10*time.Second))
	if err != nil || out(res) != "alive" {
		t.Errorf("other sandbox during the bomb: %q %v", res.Stdout, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("other sandbox took %v to answer during the bomb", d)
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("fork bomb: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("fork bomb command never returned")
	}
	// The bombed sandbox answers again (booted anew if it had to die). Under
	// gVisor the pids limit can take the whole sandbox down; it may still be
	// going down when the bomb's command returns, so the first command may
	// find it gone (unavailable) and the one after it boots a fresh sandbox.
	// The bomb's last processes can also outlive its command by a moment
	// (a fork racing the kill of its group), holding the process limit so
	// that the next command cannot fork: the sandbox must answer again
	// within 30 s.
	s.boot(t, s.be, bomb, sandbox.Limits{})
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err = s.be.Exec(context.Background(), bomb, Sh("echo alive", 10*time.Second))
		if errors.Is(err, sandbox.ErrUnavailable) {
			s.boot(t, s.be, bomb, sandbox.Limits{})
			res, err = s.be.Exec(context.Background(), bomb, Sh("echo alive", 10*time.Second))
		}
		if (err == nil && out(res) == "alive") || time.Now().After(deadline) {
			break
		}
		t.Logf("bombed sandbox not answering yet: exit %d stdout %q stderr %q err %v", res.ExitCode, res.Stdout, res.Stderr, err)
		time.Sleep(time.Second)
	}
	if err != nil || out(res) != "alive" {
		t.Errorf("bombed sandbox: exit %d stdout %q stderr %q err %v", res.ExitCode, res.Stdout, res.Stderr, err)
	}
	_ = s.be.Stop(context.Background(), bomb)
}

func (s *suite) testOutputFlood(t *testing.T) {
	id := uniq("flood")
	s.boot(t, s.be, id, sandbox.Limits{})
	start := time.Now()
	var streamed int
	// 64 MB a stream: enough to pass the cap 64 times, small enough for
	// gVisor's slower pipes.
	cmd := Sh("head -c 64000000 /dev/zero; head -c 64000000 /dev/zero >&2", 120*time.Second)
	cmd.Output = func(_ sandbox.Stream, chunk []byte) { streamed += len(chunk) }
	res, err := s.exec(t, s.be, id, cmd)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20 // the default cap
	if res.TimedOut {
		t.Errorf("the flood timed out after %v: output is not drained fast enough", time.Since(start))
	}
	want := limit + len("...[truncated]")
	if !res.StdoutTruncated || !res.StderrTruncated ||
		!bytes.HasSuffix(res.Stdout, []byte("...[truncated]")) || len(res.Stdout) != want || len(res.Stderr) != want {
		t.Errorf("stdout %d bytes truncated %v, stderr %d bytes truncated %v; want each capped at %d",
			len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated, limit)
	}
	if streamed > 2*limit {
		t.Errorf("streamed %d bytes, more than two caps", streamed)
	}
	t.Logf("128 MB flood took %v", time.Since(start))
	if r := s.run(t, id, "echo alive"); out(r) != "alive" {
		t.Errorf("after the flood: %q", r.Stdout)
	}
}

func (s *suite) testMemoryHog(t *testing.T) {
	if s.caps.Memory == MemoryNone {
		t.Skip("backend enforces no memory limit (Capabilities.Memory)")
	}
	id := uniq("hog")
	s.boot(t, s.be, id, sandbox.Limits{MemoryBytes: HogMemory})
	res, err := s.exec(t, s.be, id, Sh(`python3 -c "
b = []
for i in range(64):
    b.append(bytearray(32 << 20))
print('survived')"`, 60*time.Second))
	switch {
	case err == nil:
		if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "survived") {
			t.Errorf("hog survived: exit %d stdout %q", res.ExitCode, res.Stdout)
		}
		if s.caps.Memory == MemoryOOMKill && !res.OOMKilled {
			t.Errorf("exit %d, OOMKilled false, stderr %q; want killed for memory", res.ExitCode, res.Stderr)
		}
		if s.caps.Memory == MemoryAllocFails && !strings.Contains(string(res.Stderr), "MemoryError") {
			t.Errorf("exit %d stderr %q; want a failed allocation", res.ExitCode, res.Stderr)
		}
	case s.caps.Memory == MemoryOOMKill && errors.Is(err, sandbox.ErrUnavailable):
		// The whole sandbox went down (gVisor's kernel is in the cgroup).
		if !strings.Contains(err.Error(), "out of memory") {
			t.Errorf("sandbox died, but not reported as out of memory: %v", err)
		}
	default:
		t.Fatal(err)
	}
	s.boot(t, s.be, id, sandbox.Limits{MemoryBytes: HogMemory})
	if r := s.run(t, id, "echo alive"); out(r) != "alive" {
		t.Errorf("after the hog: %q", r.Stdout)
	}
	_ = s.be.Stop(context.Background(), id)
}

func (s *suite) testDiskFill(t *testing.T) {
	if !s.caps.Disk {
		t.Skip("backend enforces no disk quota (Capabilities.Disk)")
	}
	id := uniq("fill")
	s.boot(t, s.be, id, sandbox.Limits{})
	r := s.run(t, id, "dd if=/dev/zero of=big bs=1M count=200 2>&1; echo; wc -c < big")
	text := string(r.Stdout)
	if !strings.Contains(text, "No space left on device") {
		t.Errorf("dd output %q: want ENOSPC", text)
	}
	var size int64
	if f := strings.Fields(text); len(f) > 0 {
		fmt.Sscan(f[len(f)-1], &size)
	}
	if size <= 0 || size > DiskBytes {
		t.Errorf("file size %d past the %d-byte quota", size, DiskBytes)
	}
	if r := s.run(t, id, "rm big && echo x > small && cat small"); out(r) != "x" {
		t.Errorf("after freeing: %q %q", r.Stdout, r.Stderr)
	}
}

// testCPUAccounting: the CPU time read from a sandbox's control group grows
// by what a command burns in it, and is not found once the sandbox
// stopped. A backend without accounting says it is unsupported.
func (s *suite) testCPUAccounting(t *testing.T) {
	ctx := context.Background()
	m, ok := s.be.(cpuMeter)
	if !s.caps.CPU {
		if ok {
			id := uniq("cpu")
			s.boot(t, s.be, id, sandbox.Limits{})
			defer s.be.Stop(ctx, id)
			if _, err := m.SandboxCPU(ctx, id); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Fatalf("SandboxCPU without accounting: %v, want unsupported", err)
			}
		}
		return
	}
	if !ok {
		t.Fatalf("backend %s claims CPU accounting but has no SandboxCPU", s.be.Name())
	}
	id := uniq("cpu")
	s.boot(t, s.be, id, sandbox.Limits{})
	c0, err := m.SandboxCPU(ctx, id)
	if err != nil {
		t.Fatalf("SandboxCPU after boot: %v", err)
	}
	s.run(t, id, `python3 -c "
import time
while time.process_time() < 0.6:
    pass
"`)
	c1, err := m.SandboxCPU(ctx, id)
	if err != nil {
		t.Fatalf("SandboxCPU after the burn: %v", err)
	}
	// The host's count, not the sandbox's: under gVisor the application
	// kernel's own accounting (what python3 reads) runs ahead of the host's
	// by up to 2× here, so the bound is half the burn, less a margin.
	if c1-c0 < 250*time.Millisecond || c1-c0 > time.Minute {
		t.Fatalf("sandbox CPU went from %v to %v: want at least 0.25 s more for the 0.6 s burnt", c0, c1)
	}
	if err := s.be.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SandboxCPU(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("SandboxCPU of a stopped sandbox: %v, want not found", err)
	}
}
