package main

// The lifecycle section: the host resources a threadbox
// server holds before, during and after many containers are created, used
// once and expired by its sweeper — Docker containers, mounts and loop
// devices of its data folder, the bytes used under it, and the server's
// resident memory, threads and open files — and whether each is back to
// its baseline once the sweeper has removed them all.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
)

// lifecycleOpts configure the lifecycle section.
type lifecycleOpts struct {
	n           int           // containers created and used once
	concurrency int           // requests in flight at once
	maxAge      time.Duration // CONTAINER_MAX_AGE of the server
	sweep       time.Duration // SWEEP_INTERVAL
	idle        time.Duration // SANDBOX_IDLE
	diskBytes   int64         // SANDBOX_DISK_BYTES
	timeout     time.Duration // bound of the whole section
}

// lifeSample is one reading of the resources the server holds.
type lifeSample struct {
	containers   int   // Docker containers labelled with the instance
	mounts       int   // mount points under DATA_DIR
	loops        int   // loop devices backed by files under DATA_DIR
	sandboxBytes int64 // bytes used under DATA_DIR/{containers,disks,run}
	otherBytes   int64 // bytes used by the rest of DATA_DIR (database, keys)
	entries      int   // entries directly inside DATA_DIR/containers and DATA_DIR/disks
	rss          int64 // VmRSS of the server
	threads      int   // its OS threads
	fds          int   // its open file descriptors
}

// gone reports whether nothing of a sandbox is left.
func (s lifeSample) gone() bool {
	return s.containers == 0 && s.mounts == 0 && s.loops == 0 && s.entries == 0
}

// peak keeps the larger of each figure.
func (s *lifeSample) peak(o lifeSample) {
	s.containers = max(s.containers, o.containers)
	s.mounts = max(s.mounts, o.mounts)
	s.loops = max(s.loops, o.loops)
	s.sandboxBytes = max(s.sandboxBytes, o.sandboxBytes)
	s.otherBytes = max(s.otherBytes, o.otherBytes)
	s.entries = max(s.entries, o.entries)
	s.rss = max(s.rss, o.rss)
	s.threads = max(s.threads, o.threads)
	s.fds = max(s.fds, o.fds)
}

// lifeProbe reads the resources of one server.
type lifeProbe struct {
	instance string
	data     string // DATA_DIR, symbolic links resolved
	pid      int
}

// sample reads every figure once.
func (p *lifeProbe) sample(ctx context.Context) (lifeSample, error) {
	var s lifeSample
	n, err := docker.CountInstance(ctx, p.instance)
	if err != nil {
		return s, fmt.Errorf("list containers: %w", err)
	}
	s.containers = n
	mounts, err := hostdirs.MountsBelow(p.data)
	if err != nil {
		return s, err
	}
	s.mounts = len(mounts)
	s.loops = len(hostdirs.LoopsBelow(p.data))
	s.sandboxBytes, s.otherBytes = diskUsed(p.data)
	for _, d := range []string{"containers", "disks"} {
		ents, _ := os.ReadDir(filepath.Join(p.data, d))
		s.entries += len(ents)
	}
	if s.rss, err = procStatus(p.pid, "VmRSS"); err != nil {
		return s, err
	}
	if s.threads, err = procStatusCount(p.pid, "Threads"); err != nil {
		return s, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid))
	if err != nil {
		return s, fmt.Errorf("open files: %w", err)
	}
	s.fds = len(fds)
	return s, nil
}

// detail names what the server holds open, by kind ("fd socket", "fd
// anon_inode:[eventpoll]", "fd DATA_DIR/threadbox.db"), and the bytes used
// by each file of DATA_DIR ("file threadbox.db") and by each of its
// folders itself, without what it holds ("folder containers/"), so that a figure not back to its baseline can say what
// stayed.
func (p *lifeProbe) detail() map[string]int64 {
	d := map[string]int64{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", p.pid))
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
		case strings.HasPrefix(t, p.data+"/"):
			t = "DATA_DIR/" + strings.TrimPrefix(t, p.data+"/")
		}
		d["fd "+t]++
	}
	ents, _ := os.ReadDir(p.data)
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(p.data, e.Name()), &st) != nil {
			continue
		}
		switch {
		case e.IsDir():
			// A folder's own blocks: ext4 does not shrink a folder
			// that once held many entries.
			d["folder "+e.Name()+"/"] = st.Blocks * 512
		default:
			d["file "+e.Name()] = st.Blocks * 512
		}
	}
	return d
}

// diffDetail describes what changed between two details.
func diffDetail(before, after map[string]int64) []string {
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		b, a := before[k], after[k]
		if a == b {
			continue
		}
		if !strings.HasPrefix(k, "fd ") {
			out = append(out, fmt.Sprintf("%s %s → %s", k, kib(b), kib(a)))
		} else {
			out = append(out, fmt.Sprintf("%s %d → %d", k, b, a))
		}
	}
	sort.Strings(out)
	return out
}

// waitGone samples until nothing of a sandbox is left or ctx ends, keeping
// the peak of every sample in peak.
func (p *lifeProbe) waitGone(ctx context.Context, peak *lifeSample) error {
	for {
		s, err := p.sample(ctx)
		if err != nil {
			return err
		}
		peak.peak(s)
		if s.gone() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not all gone: %d containers, %d mounts, %d loop devices, %d folders and images left: %w", s.containers, s.mounts, s.loops, s.entries, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// benchLifecycle starts threadbox with docker sandboxes, the runner model
// and a short maximum age, creates o.lifecycle.n containers through the
// Messages API, runs one command in each, waits for the sweeper to expire
// them all and prints the resources before, at the peak and after.
func benchLifecycle(ctx context.Context, o opts, out io.Writer) (err error) {
	lo := o.lifecycle
	if lo.n < 1 || lo.concurrency < 1 {
		return fmt.Errorf("need at least one container and one request at a time")
	}
	work, err := os.MkdirTemp("", "threadbox-bench-lifecycle-")
	if err != nil {
		return err
	}
	if work, err = filepath.EvalSymlinks(work); err != nil {
		return err
	}
	// The folder goes last: its mounts, if any are left, come off first.
	defer os.RemoveAll(work)
	bin, err := threadboxBinary(ctx, o.files.threadboxBin, work)
	if err != nil {
		return err
	}
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return err
	}
	quota := "none"
	if _, lerr := exec.LookPath("mkfs.ext4"); lerr == nil && os.Geteuid() == 0 {
		quota = "loop"
	}
	srv, err := startThreadbox(ctx, bin, work,
		"SANDBOX_BACKEND=docker", "SANDBOX_WARM_POOL=0", "THREADBOX_AGENT_BIN="+agentBin, "SANDBOX_IMAGE="+o.image, "SANDBOX_RUNTIME="+o.runtime,
		"SANDBOX_DISK_QUOTA="+quota, "SANDBOX_DISK_BYTES="+strconv.FormatInt(lo.diskBytes, 10),
		"CONTAINER_MAX_AGE="+lo.maxAge.String(), "SWEEP_INTERVAL="+lo.sweep.String(), "SANDBOX_IDLE="+lo.idle.String(),
		"MODEL_PROVIDER=runner", "LOG_LEVEL=warn")
	if err != nil {
		return err
	}
	cleaned := "nothing was left to clean"
	defer func() {
		left, cerr := cleanLifecycle(ctx, srv)
		if cerr != nil && err == nil {
			err = cerr
		}
		if left != "" {
			cleaned = left
		}
		fmt.Fprintf(out, "\nAfter SIGTERM: %s.\n", cleaned)
	}()
	probe := &lifeProbe{instance: srv.instance, data: srv.data, pid: srv.cmd.Process.Pid}

	rctx, cancel := context.WithTimeout(ctx, lo.timeout)
	defer cancel()
	// Without keep-alive no connection of the bench stays open in the
	// server between the readings.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
	use := func(id string) error {
		body, err := json.Marshal(map[string]any{
			"model": "default", "max_tokens": 64, "container": id,
			"tools": []map[string]string{{"type": "code_execution_20250825", "name": "code_execution"}},
			"messages": []map[string]string{{"role": "user", "content": "write a file\n```bash\n" +
				"head -c 65536 /dev/urandom > /mnt/user-data/outputs/used.bin && echo used-" + id + "\n```\n"}},
		})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(rctx, "POST", srv.base+"/api/gpt/v1/messages", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+srv.token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"return_code":0`)) || !bytes.Contains(b, []byte("used-"+id)) {
			return fmt.Errorf("container %s: %d %s", id, resp.StatusCode, bytes.TrimSpace(b))
		}
		return nil
	}

	// A warm-up container, used and swept, so that the baseline holds what
	// the first use of anything opens once (database connections, the
	// Docker client's).
	fmt.Fprintln(os.Stderr, "bench: lifecycle warm-up")
	if err := use("lc-warm"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var ignore lifeSample
	if err := probe.waitGone(rctx, &ignore); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	settle(rctx, lo)
	base, err := probe.sample(rctx)
	if err != nil {
		return err
	}
	baseDetail := probe.detail()

	// The uses, with a sampler keeping the peak beside them.
	fmt.Fprintf(os.Stderr, "bench: lifecycle: %d containers, %d at a time\n", lo.n, lo.concurrency)
	peak := base
	var (
		mu       sync.Mutex
		failures []error
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	sampling, stopSampling := context.WithCancel(rctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if s, err := probe.sample(sampling); err == nil {
				mu.Lock()
				peak.peak(s)
				mu.Unlock()
			}
			select {
			case <-sampling.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	for range lo.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				i := next.Add(1)
				if i > int64(lo.n) {
					return
				}
				if err := use(fmt.Sprintf("lc-%04d", i)); err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	lastUse := time.Now()
	stopSampling()
	<-sampled
	if err := rctx.Err(); err != nil {
		return fmt.Errorf("uses not done within %s: %w", lo.timeout, err)
	}
	if len(failures) == lo.n {
		return fmt.Errorf("every use failed, the first: %w", failures[0])
	}
	fmt.Fprintf(os.Stderr, "bench: lifecycle: %d used in %s, waiting for the sweeper\n", lo.n-len(failures), lastUse.Sub(start).Round(time.Millisecond))
	if err := probe.waitGone(rctx, &peak); err != nil {
		return err
	}
	allGone := time.Since(lastUse)
	settle(rctx, lo)
	after, err := probe.sample(rctx)
	if err != nil {
		return err
	}
	changed := diffDetail(baseDetail, probe.detail())

	load, _ := os.ReadFile("/proc/loadavg")
	lf := strings.Fields(string(load))
	fmt.Fprintf(out, "\n### Lifecycle: %d containers created, used once and expired, %s, load average %s\n\n",
		lo.n, time.Now().UTC().Format(time.RFC3339), strings.Join(lf[:min(3, len(lf))], " "))
	fmt.Fprintf(out, "docker backend, runtime %s, SANDBOX_DISK_QUOTA=%s, SANDBOX_DISK_BYTES=%s, CONTAINER_MAX_AGE=%s, SWEEP_INTERVAL=%s, SANDBOX_IDLE=%s, runner model, SQLite. "+
		"Each container is made by one Messages API request (%d in flight) whose bash block writes 64 KiB to outputs/. "+
		"%d uses in %s, %d failed. Baseline: after one warm-up container was used and swept; peak: the largest of samples every 0.5 s from the first use until all were gone; "+
		"after sweep: %s after the last sandbox, folder, mount and loop device went. Threads are the server's OS threads (/proc/PID/status): threadbox exposes no goroutine count.\n\n",
		o.runtime, quota, mib(lo.diskBytes), lo.maxAge, lo.sweep, lo.idle, lo.concurrency,
		lo.n-len(failures), lastUse.Sub(start).Round(100*time.Millisecond), len(failures), settleTime(lo))
	if len(failures) > 0 {
		fmt.Fprintf(out, "First failure: %v\n\n", failures[0])
	}
	fmt.Fprintln(out, "| metric | baseline | peak | after sweep | back to baseline? |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---|")
	count := func(name string, b, p, a int) {
		fmt.Fprintf(out, "| %s | %d | %d | %d | %s |\n", name, b, p, a, yesNo(a <= b, fmt.Sprintf("%+d", a-b)))
	}
	size := func(name string, b, p, a int64) {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s |\n", name, kib(b), kib(p), kib(a), yesNo(a <= b, "+"+kib(a-b)))
	}
	count("Docker containers of the instance", base.containers, peak.containers, after.containers)
	count("mounts under DATA_DIR", base.mounts, peak.mounts, after.mounts)
	count("loop devices backed under DATA_DIR", base.loops, peak.loops, after.loops)
	count("container folders and disk images", base.entries, peak.entries, after.entries)
	size("disk used: containers/, disks/, run/", base.sandboxBytes, peak.sandboxBytes, after.sandboxBytes)
	size("disk used: the rest of DATA_DIR (SQLite, keys)", base.otherBytes, peak.otherBytes, after.otherBytes)
	size("server RSS", base.rss, peak.rss, after.rss)
	count("server OS threads", base.threads, peak.threads, after.threads)
	count("server open fds", base.fds, peak.fds, after.fds)
	if len(changed) > 0 {
		fmt.Fprintf(out, "\nChanged from the baseline after the sweep: %s.\n", strings.Join(changed, "; "))
	}
	fmt.Fprintf(out, "\nFrom the last use to all gone (no sandbox, folder, image, mount or loop device left): %s.\n", allGone.Round(100*time.Millisecond))
	return nil
}

// settleTime is how long after the last removal the final reading waits:
// two sweeps, so that what a sweep releases after a removal is released.
func settleTime(lo lifecycleOpts) time.Duration { return max(2*lo.sweep, time.Second) }

func settle(ctx context.Context, lo lifecycleOpts) {
	select {
	case <-ctx.Done():
	case <-time.After(settleTime(lo)):
	}
}

func yesNo(ok bool, delta string) string {
	if ok {
		return "yes"
	}
	return "no (" + delta + ")"
}

func kib(b int64) string {
	if b >= 10<<20 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// cleanLifecycle stops the server with SIGTERM, then removes what it left:
// the instance's Docker containers, the mounts under its data folder and
// the loop devices backed there. It returns what it had to remove, "" when
// nothing.
func cleanLifecycle(ctx context.Context, srv *threadboxProc) (string, error) {
	srv.term()
	ctx = context.WithoutCancel(ctx)
	var left []string
	if n, err := docker.CountInstance(ctx, srv.instance); err == nil && n > 0 {
		left = append(left, fmt.Sprintf("%d Docker containers removed", n))
	}
	srv.stop()
	var errs []error
	mounts, err := hostdirs.MountsBelow(srv.data)
	errs = append(errs, err)
	// The deepest first.
	for i := len(mounts) - 1; i >= 0; i-- {
		if b, err := exec.CommandContext(ctx, "umount", "-l", mounts[i]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %w: %s", mounts[i], err, bytes.TrimSpace(b)))
		}
	}
	if len(mounts) > 0 {
		left = append(left, fmt.Sprintf("%d mounts unmounted", len(mounts)))
	}
	loops := hostdirs.LoopsBelow(srv.data)
	for _, dev := range loops {
		if b, err := exec.CommandContext(ctx, "losetup", "-d", dev).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup -d %s: %w: %s", dev, err, bytes.TrimSpace(b)))
		}
	}
	if len(loops) > 0 {
		left = append(left, fmt.Sprintf("%d loop devices detached", len(loops)))
	}
	if len(left) == 0 {
		return "", errors.Join(errs...)
	}
	return "left behind and cleaned by the bench: " + strings.Join(left, ", "), errors.Join(errs...)
}

// diskUsed walks dir as `du -x` does (st_blocks, not crossing into other
// file systems: a loop-mounted container folder is counted as its image
// file) and returns the bytes used under containers/, disks/ and run/, and
// under the rest. Entries that vanish during the walk are skipped.
func diskUsed(dir string) (sandboxes, rest int64) {
	var root syscall.Stat_t
	if syscall.Lstat(dir, &root) != nil {
		return 0, 0
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
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
		used := st.Blocks * 512
		rel, _ := filepath.Rel(dir, path)
		switch top, _, _ := strings.Cut(rel, string(filepath.Separator)); top {
		case "containers", "disks", "run":
			sandboxes += used
		default:
			rest += used
		}
		return nil
	})
	return sandboxes, rest
}

// procStatusCount reads one count field of /proc/<pid>/status.
func procStatusCount(pid int, field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("process status: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
