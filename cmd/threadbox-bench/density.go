package main

// The density section: idle sandboxes are opened one
// after another, as the server opens them (the Docker backend with its host
// folders and agent sockets, in this process), up to -density; then it
// reports what one idle sandbox costs: the memory its cgroup charges, the
// PSS of its containerd shim (outside the cgroup), the host-side memory and
// goroutines per sandbox in this process (what threadbox itself holds per
// sandbox), the time to open them and the first command's latency on the
// last one.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
)

// densityOpts configure the density section.
type densityOpts struct {
	n int // idle sandboxes to open
}

func benchDensity(ctx context.Context, o opts, out io.Writer) error {
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return err
	}
	data, err := os.MkdirTemp("", "threadbox-bench-density-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	instance := fmt.Sprintf("bench%d-density", os.Getpid())
	be, err := docker.New(docker.Config{
		Settings: boxes.Settings{Instance: instance},
		Image:    o.image, Runtime: o.runtime, AgentBin: agentBin,
		Dirs:      hostdirs.New(data, hostdirs.Options{Quota: hostdirs.QuotaNone}),
		SocketDir: filepath.Join(data, "run"),
	})
	if err != nil {
		return err
	}
	defer func() {
		be.Close()
		_ = docker.RemoveInstance(context.WithoutCancel(ctx), instance)
	}()
	if err := be.Available(ctx); err != nil {
		return err
	}
	runtime.GC()
	rss0, _ := procStatusKiB(os.Getpid(), "VmRSS")
	g0 := runtime.NumGoroutine()
	avail0 := memAvailable()
	fmt.Fprintf(os.Stderr, "bench: density: opening %d idle sandboxes\n", o.density.n)
	start := time.Now()
	opened := 0
	var openErr error
	for i := range o.density.n {
		if err := be.Ensure(ctx, sandbox.Spec{ID: fmt.Sprintf("idle-%04d", i)}); err != nil {
			openErr = err
			break
		}
		opened++
		if opened%25 == 0 {
			fmt.Fprintf(os.Stderr, "bench: density: %d open after %s\n", opened, time.Since(start).Round(time.Second))
		}
	}
	openTime := time.Since(start)
	if opened == 0 {
		return fmt.Errorf("density: no sandbox opened: %w", openErr)
	}
	t := time.Now()
	if _, err := be.Exec(ctx, fmt.Sprintf("idle-%04d", opened-1), sandbox.Command{Args: []string{"true"}}); err != nil {
		return fmt.Errorf("density: first command: %w", err)
	}
	first := time.Since(t)
	time.Sleep(3 * time.Second) // let them settle idle
	runtime.GC()
	rss1, _ := procStatusKiB(os.Getpid(), "VmRSS")
	g1 := runtime.NumGoroutine()
	avail1 := memAvailable()
	ids := instanceContainers(ctx, instance)
	var cg, cgRSS, shim int64
	for _, id := range ids {
		u, r := cgroupMemory(id)
		cg += u
		cgRSS += r
	}
	shim = shimRSS(ids)
	per := func(v int64) string { return kib(v / int64(max(len(ids), 1))) }
	fmt.Fprintf(out, "density: runtime %s, image %s, %s; %d idle sandboxes opened one after another", o.runtime, o.image, time.Now().UTC().Format(time.RFC3339), opened)
	if openErr != nil {
		fmt.Fprintf(out, " (stopped at %d: %v)", opened, openErr)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tvalue\t")
	fmt.Fprintf(tw, "time to open %d\t%s (%s each)\t\n", opened, openTime.Round(time.Millisecond), (openTime / time.Duration(opened)).Round(time.Millisecond))
	fmt.Fprintf(tw, "first command (true) of the last one\t%s\t\n", ms(first))
	fmt.Fprintf(tw, "cgroup memory per idle sandbox (usage / rss)\t%s / %s\t\n", per(cg), per(cgRSS))
	fmt.Fprintf(tw, "containerd shim PSS per idle sandbox\t%s\t\n", per(shim))
	fmt.Fprintf(tw, "host memory in all (cgroups + shims)\t%s\t\n", kib(cg+shim))
	fmt.Fprintf(tw, "host MemAvailable drop (other sessions add noise)\t%s\t\n", kib(avail0-avail1))
	fmt.Fprintf(tw, "threadbox-side RSS: before / with %d open\t%s / %s\t\n", opened, kib(rss0<<10), kib(rss1<<10))
	fmt.Fprintf(tw, "threadbox-side goroutines per sandbox\t%.1f\t\n", float64(g1-g0)/float64(opened))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "targets: %d idle sandboxes with <= 4 GiB of host memory in all (measured %s) and threadbox RSS <= 200 MiB (measured %s)\n\n",
		200, kib((cg+shim)*200/int64(max(len(ids), 1))), kib(rss1<<10))
	fmt.Fprintln(os.Stderr, "bench: density: removing")
	return nil
}

// instanceContainers lists the full Docker ids of an instance's containers.
func instanceContainers(ctx context.Context, instance string) []string {
	b, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--no-trunc", "--filter", "label="+docker.LabelInstance+"="+instance).Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// cgroupMemory reads a container's memory cgroup: usage (with page cache)
// and rss; cgroup v1 (cgroupfs driver) or v2 (systemd driver).
func cgroupMemory(id string) (usage, rss int64) {
	for _, dir := range []string{"/sys/fs/cgroup/memory/docker/" + id, "/sys/fs/cgroup/system.slice/docker-" + id + ".scope"} {
		if b, err := os.ReadFile(dir + "/memory.usage_in_bytes"); err == nil {
			usage, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return usage, statField(dir+"/memory.stat", "total_rss")
		}
		if b, err := os.ReadFile(dir + "/memory.current"); err == nil {
			usage, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return usage, statField(dir+"/memory.stat", "anon")
		}
	}
	return 0, 0
}

func statField(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// shimRSS sums the proportional set size (Pss) of the containerd shims
// serving ids.
func shimRSS(ids []string) int64 {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var sum int64
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a == "-id" && i+1 < len(args) && want[args[i+1]] {
				// Pss: the shims share their binary's pages, which RSS
				// would count once per shim.
				if kb, err := procStatusLine(filepath.Join(filepath.Dir(p), "smaps_rollup"), "Pss"); err == nil {
					sum += kb << 10
				}
			}
		}
	}
	return sum
}

// procStatusKiB reads a "<field>: N kB" line of /proc/PID/status.
func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable() int64 {
	kb, _ := procStatusLine("/proc/meminfo", "MemAvailable")
	return kb << 10
}

func procStatusLine(path, field string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s not in %s", field, path)
}
