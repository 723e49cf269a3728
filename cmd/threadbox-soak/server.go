package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

// server is a threadbox process the soak started, and restarts after the
// faults that end it.
type server struct {
	bin      string
	env      []string
	base     string
	instance string
	data     string
	logf     *os.File

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	start time.Time // when the running process started
}

// newServer prepares (without starting) a threadbox whose log is in work
// and whose DATA_DIR is dataRoot/data.
func newServer(cfg config, work, dataRoot string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	instance := fmt.Sprintf("soak%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	data := filepath.Join(dataRoot, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(work, "threadbox.log"))
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"LISTEN_ADDR="+addr, "DATA_DIR="+data, "DATABASE_URL="+cfg.databaseURL,
		"SANDBOX_BACKEND="+cfg.backend, "THREADBOX_INSTANCE="+instance, "THREADBOX_AGENT_BIN="+cfg.agentBin,
		"SANDBOX_DISK_QUOTA="+cfg.diskQuota, "SANDBOX_DISK_BYTES=67108864",
		"SANDBOX_IDLE="+cfg.idle.String(), "SWEEP_INTERVAL="+cfg.sweep.String(), "LEASE_TTL=6s",
		"CONTAINER_MAX_AGE="+cfg.maxAge.String(), "SHUTDOWN_GRACE=5s", "LOG_LEVEL=warn",
		"SANDBOX_MEMORY_BYTES=268435456",
		// The warm pool keeps sandboxes of the instance running by design;
		// probe counts them apart (sample.warm).
		"SANDBOX_WARM_POOL="+strconv.Itoa(cfg.warmPool))
	if cfg.upstreamURL != "" {
		env = append(env, "MODEL_PROVIDER=anthropic", "MODEL_BASE_URL="+cfg.upstreamURL, "MODEL_API_KEY=soak", "MODEL_NAME=soak-model")
	} else {
		env = append(env, "MODEL_PROVIDER=runner")
	}
	return &server{bin: cfg.threadboxBin, env: env, base: "http://" + addr, instance: instance, data: data, logf: logf}, nil
}

// bootstrap makes the org and its admin and returns the admin's API token.
func (s *server) bootstrap(ctx context.Context) (string, error) {
	// Names of their own, so that runs can share a PostgreSQL database.
	boot := exec.CommandContext(ctx, s.bin, "admin", "bootstrap", "--org", s.instance, "--email", "admin@"+s.instance+".test")
	boot.Env = s.env
	boot.Stderr = s.logf
	tok, err := boot.Output()
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	return strings.TrimSpace(string(tok)), nil
}

// run starts the process and waits until it answers /healthz.
func (s *server) run(ctx context.Context) error {
	cmd := exec.Command(s.bin, "serve")
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s.logf, s.logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start threadbox: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.start = cmd, done, time.Now()
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(s.base + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("threadbox exited at start (see %s)", s.logf.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("threadbox did not answer within 60s")
		}
	}
}

// pid returns the running process's id, 0 when none runs.
func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	select {
	case <-s.done:
		return 0
	default:
		return s.cmd.Process.Pid
	}
}

// started returns when the running process started.
func (s *server) started() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start
}

// kill ends the process with SIGKILL and waits for it.
func (s *server) kill() {
	s.signal(syscall.SIGKILL, 0)
}

// term ends the process with SIGTERM, then SIGKILL after grace, and
// reports whether it stopped by itself.
func (s *server) term(grace time.Duration) bool {
	return s.signal(syscall.SIGTERM, grace)
}

func (s *server) signal(sig syscall.Signal, grace time.Duration) bool {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		<-done
		return false
	}
	select {
	case <-done:
		return true
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// sample is one reading of the host resources of the soak's threadbox.
type sample struct {
	at         time.Time
	containers int // Docker containers of the instance, warm ones apart
	warm       int // warm-pool sandboxes (not claimed) of the instance
	mounts     int // mount points under DATA_DIR
	loops      int // loop devices backed under DATA_DIR
	entries    int // entries in DATA_DIR/containers and DATA_DIR/disks
	entryNames []string
	diskBytes  int64 // bytes used under DATA_DIR/{containers,disks,run}
	rss        int64 // VmRSS of the process
	threads    int   // its OS threads
	fds        int   // its open file descriptors
	pid        int
}

// probe reads a sample.
func (s *server) probe(ctx context.Context) (sample, error) {
	out := sample{at: time.Now(), pid: s.pid()}
	// One listing, so that a warm sandbox made between two of them is not
	// counted as warm without being counted at all.
	b, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--filter", "label=threadbox.instance="+s.instance, "--format", `{{.ID}}|{{.Label "threadbox.warm"}}|{{.Names}}|{{.Label "threadbox.container"}}`).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("docker ps: %w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return out, fmt.Errorf("docker ps: %w", err)
	}
	out.containers, out.warm = countContainers(b, s.instance, func(name string) bool {
		owner, err := slot.Owner(filepath.Join(s.data, "pool", hostdirs.SafeID(name)))
		return err == nil && owner != ""
	})
	mounts, err := hostdirs.MountsBelow(s.data)
	if err != nil {
		return out, err
	}
	// A warm sandbox has one mount, its slot folder (DATA_DIR/pool/<slot>);
	// slot folders beyond the warm sandboxes' count are counted.
	slots := 0
	for _, m := range mounts {
		if filepath.Dir(m) == filepath.Join(s.data, "pool") {
			slots++
		}
	}
	out.mounts = len(mounts) - min(slots, out.warm)
	out.loops = len(hostdirs.LoopsBelow(s.data))
	for _, d := range []string{"containers", "disks"} {
		ents, _ := os.ReadDir(filepath.Join(s.data, d))
		out.entries += len(ents)
		for _, e := range ents {
			out.entryNames = append(out.entryNames, d+"/"+e.Name())
		}
	}
	out.diskBytes = diskUsed(s.data)
	if out.pid != 0 {
		out.rss, _ = statusField(out.pid, "VmRSS")
		th, _ := statusField(out.pid, "Threads")
		out.threads = int(th)
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", out.pid))
		out.fds = len(fds)
	}
	return out, nil
}

// statusField reads a number of /proc/PID/status (kB fields in bytes).
func statusField(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("process status: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			n, err := strconv.ParseInt(f[0], 10, 64)
			if len(f) > 1 && f[1] == "kB" {
				n <<= 10
			}
			return n, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// diskUsed returns the bytes used under DATA_DIR's containers/, disks/ and
// run/, not crossing into mounted file systems.
func diskUsed(dir string) int64 {
	var root syscall.Stat_t
	if syscall.Lstat(dir, &root) != nil {
		return 0
	}
	var n int64
	for _, top := range []string{"containers", "disks", "run"} {
		_ = filepath.WalkDir(filepath.Join(dir, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Lstat(path, &st) != nil {
				return nil
			}
			if st.Dev != root.Dev {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			n += st.Blocks * 512
			return nil
		})
	}
	return n
}

// cleanUp stops the server and removes whatever it left on the host: the
// instance's Docker containers, mounts and loop devices under DATA_DIR.
// It returns what it had to remove.
func (s *server) cleanUp() []string {
	s.term(15 * time.Second)
	var left []string
	ctx := context.Background()
	if b, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label=threadbox.instance="+s.instance).Output(); err == nil {
		if ids := strings.Fields(string(b)); len(ids) > 0 {
			_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).Run()
			left = append(left, fmt.Sprintf("%d containers", len(ids)))
		}
	}
	mounts, _ := hostdirs.MountsBelow(s.data)
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = exec.CommandContext(ctx, "umount", "-l", mounts[i]).Run()
	}
	if len(mounts) > 0 {
		left = append(left, fmt.Sprintf("%d mounts", len(mounts)))
	}
	loops := hostdirs.LoopsBelow(s.data)
	for _, dev := range loops {
		_ = exec.CommandContext(ctx, "losetup", "-d", dev).Run()
	}
	if len(loops) > 0 {
		left = append(left, fmt.Sprintf("%d loop devices", len(loops)))
	}
	s.logf.Close()
	return left
}

// tail returns the last n bytes of the server's log.
func (s *server) tailString(n int64) string {
	b, err := os.ReadFile(s.logf.Name())
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(bytes.TrimSpace(b))
}

// fdKinds counts the process's open files by kind (socket, pipe, a path).
func fdKinds(pid int) map[string]int {
	out := map[string]int{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		t, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(t, "socket:"):
			t = "socket"
		case strings.HasPrefix(t, "pipe:"):
			t = "pipe"
		}
		out[t]++
	}
	return out
}

// sockets describes the process's sockets from /proc/PID/net, counted by
// kind, state and remote address (unix sockets by path).
func sockets(pid int) string {
	inodes := map[string]bool{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if t, err := os.Readlink(fd); err == nil && strings.HasPrefix(t, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(t, "socket:["), "]")] = true
		}
	}
	n := map[string]int{}
	for _, kind := range []string{"tcp", "tcp6", "unix"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, kind))
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			switch {
			case kind == "unix" && len(f) >= 7 && inodes[f[6]]:
				path := ""
				if len(f) > 7 {
					path = f[7]
				}
				n["unix state "+f[5]+" "+path]++
			case kind != "unix" && len(f) >= 10 && inodes[f[9]]:
				n[kind+" state "+f[3]+" local "+f[1]+" remote "+f[2]]++
			}
		}
	}
	var out []string
	for k, c := range n {
		out = append(out, fmt.Sprintf("    %d× %s", c, k))
	}
	return strings.Join(out, "\n")
}

// logLevels counts the server's log lines at level (ERROR, WARN) by
// message, with the first cause seen for each.
func (s *server) logLevels(level string) map[string]logCount {
	out := map[string]logCount{}
	b, err := os.ReadFile(s.logf.Name())
	if err != nil {
		return out
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil || rec["level"] != level {
			continue
		}
		msg := fmt.Sprint(rec["msg"])
		c := out[msg]
		c.n++
		if c.example == "" {
			for _, k := range []string{"err", "cause", "error"} {
				if v, ok := rec[k]; ok {
					c.example = fmt.Sprint(v)
					break
				}
			}
			if p, ok := rec["path"]; ok {
				c.example = fmt.Sprint(rec["method"], " ", p, ": ", c.example)
			}
		}
		out[msg] = c
	}
	return out
}

// logCount is how often a message was logged, with one example.
type logCount struct {
	n       int
	example string
}

// countContainers splits a `docker ps` listing of "<id>|<threadbox.warm
// label>|<name>|<threadbox.container label>" lines into the containers that
// serve a container (claimed warm sandboxes among them) and the unclaimed
// warm ones: labelled warm and still named after their slot
// (threadbox-<instance>-<slot>), since a claim renames the container but
// cannot change its labels, and whose slot claimed does not say is claimed
// (a claim records its owner in the slot before the rename, which follows
// the claim's answer).
func countContainers(listing []byte, instance string, claimed func(slot string) bool) (containers, warm int) {
	for _, l := range strings.Split(string(listing), "\n") {
		f := strings.Split(strings.TrimSpace(l), "|")
		switch {
		case len(f) == 1 && f[0] == "":
		case len(f) == 4 && f[1] == "true" && f[2] == "threadbox-"+instance+"-"+f[3] && !claimed(f[3]):
			warm++
		default:
			containers++
		}
	}
	return containers, warm
}
