package main

// The density section: idle sandboxes are opened as a busy server opens
// them, -density-parallel at a time (the Docker backend with its host
// folders and agent sockets, in this process), up to -density; then it
// reports what one idle sandbox costs: the memory its cgroup charges, the
// PSS of its containerd shim (outside the cgroup), the daemons' growth, the
// host-side memory, goroutines and open files per sandbox in this process
// (what threadbox itself holds per sandbox), the time to open them and
// where the CPU went meanwhile, and the first command's latency on the last
// one. The baseline, in the same run, is bare containers of the same image
// created and started through the Engine API at the same parallelism.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
)

// densityOpts configure the density section.
type densityOpts struct {
	n        int // idle sandboxes to open
	parallel int // opens in flight at once
	bare     int // bare containers of the baseline (0 skips it)
}

// Targets of the density section, for the number of sandboxes -density asks.
const (
	densityTargetMem   = 4 << 30   // host memory of all idle sandboxes
	densityTargetRSS   = 200 << 20 // threadbox's RSS with them open
	densityTargetOpen  = 60 * time.Second
	densityTargetFirst = 5 * time.Millisecond
)

func benchDensity(ctx context.Context, o opts, out io.Writer) error {
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return err
	}
	parallel := max(o.density.parallel, 1)
	instance := fmt.Sprintf("bench%d-density", os.Getpid())
	// Whatever happens below (an error, an interrupt), nothing outlives the
	// section: every container of the instance and of its baseline, and the
	// data folder, go.
	defer removeDensity(ctx, instance)
	var bare *densityBare
	if o.density.bare > 0 {
		if bare, err = benchBare(ctx, o, instance+"-bare", min(o.density.bare, o.density.n), parallel); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}
	removeStaleDensityData()
	data, err := os.MkdirTemp("", fmt.Sprintf("threadbox-bench%d-density-", os.Getpid()))
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	dirs := hostdirs.New(data, hostdirs.Options{Quota: hostdirs.QuotaNone})
	be, err := docker.New(docker.Config{
		Settings: boxes.Settings{Instance: instance},
		Image:    o.image, Runtime: o.runtime, AgentBin: agentBin,
		Dirs:      dirs,
		SocketDir: filepath.Join(data, "run"),
	})
	if err != nil {
		return err
	}
	defer be.Close()
	if err := be.Available(ctx); err != nil {
		return err
	}
	runtime.GC()
	rss0, _ := procStatusKiB(os.Getpid(), "VmRSS")
	g0 := runtime.NumGoroutine()
	fd0 := openFiles()
	avail0 := memAvailable()
	daemons0 := daemonPSS()
	fmt.Fprintf(os.Stderr, "bench: density: opening %d idle sandboxes, %d at a time\n", o.density.n, parallel)
	cpu0 := cpuNow()
	var folders, ensures lats
	var last atomic.Int64 // the highest-numbered sandbox opened
	opened, openTime, openErr := openConcurrently(ctx, "density", o.density.n, parallel, func(ctx context.Context, i int) error {
		id := fmt.Sprintf("idle-%04d", i)
		t := time.Now()
		if _, err := dirs.Prepare(ctx, id); err != nil {
			return err
		}
		t1 := time.Now()
		folders.add(t1.Sub(t))
		if err := be.Ensure(ctx, sandbox.Spec{ID: id}); err != nil {
			return err
		}
		ensures.add(time.Since(t1))
		for m := last.Load(); int64(i) > m && !last.CompareAndSwap(m, int64(i)); m = last.Load() {
		}
		return nil
	})
	cpu := cpuNow().since(cpu0)
	if err := ctx.Err(); err != nil {
		return err
	}
	if opened == 0 {
		return fmt.Errorf("density: no sandbox opened: %w", openErr)
	}
	// What the idle sandboxes spend doing nothing, before any command ran
	// in them: their control groups' CPU (the agents) and their shims',
	// over idleWindow, once they settled.
	ids := instanceContainers(ctx, instance)
	// Their control groups' CPU so far is their start: runc's init (the
	// container's first process until it executes the agent) and the
	// agent's own start, which no daemon or shim is charged for.
	own := containersCPU(ids)
	time.Sleep(3 * time.Second)
	idleCg0, idleShim0 := containersCPU(ids), shimCPU(ids)
	time.Sleep(idleWindow)
	idleCg, idleShim := containersCPU(ids)-idleCg0, shimCPU(ids)-idleShim0
	// The first command of the last one, and of the 8 opened before it (one
	// sample on this shared machine is mostly noise): the median is the
	// row's figure.
	var firsts lats
	for i := last.Load(); i >= 0 && i > last.Load()-9; i-- {
		t := time.Now()
		if _, err := be.Exec(ctx, fmt.Sprintf("idle-%04d", i), sandbox.Command{Args: []string{"true"}}); err != nil {
			return fmt.Errorf("density: first command: %w", err)
		}
		firsts.add(time.Since(t))
	}
	first := firsts.d[0]
	time.Sleep(3 * time.Second) // let them settle idle
	runtime.GC()
	rss1, _ := procStatusKiB(os.Getpid(), "VmRSS")
	g1 := runtime.NumGoroutine()
	fd1 := openFiles()
	avail1 := memAvailable()
	daemons := daemonPSS() - daemons0
	cg, cgRSS, shim := containersMemory(ids)
	ownShims := shimCPU(ids)
	n := int64(max(len(ids), 1))
	per := func(v int64) string { return kib(v / n) }
	fmt.Fprintf(out, "density: runtime %s, image %s, %s; %d idle sandboxes opened, %d at a time", o.runtime, o.image, time.Now().UTC().Format(time.RFC3339), opened, parallel)
	if openErr != nil {
		fmt.Fprintf(out, " (stopped at %d: %v)", opened, openErr)
	}
	fmt.Fprintln(out)
	var nofile syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tvalue\t")
	fmt.Fprintf(tw, "time to open %d\t%s (%s each, %.1f/s)\t\n", opened, openTime.Round(time.Millisecond), (openTime / time.Duration(opened)).Round(time.Millisecond), float64(opened)/openTime.Seconds())
	if bare != nil {
		fmt.Fprintf(tw, "baseline: bare create + start of %d (Engine API, same image, %d at a time)\t%s (%s each, %.1f/s)\t\n", bare.n, parallel, bare.took.Round(time.Millisecond), (bare.took / time.Duration(bare.n)).Round(time.Millisecond), float64(bare.n)/bare.took.Seconds())
	}
	fmt.Fprintf(tw, "one open, as its caller waits: p50 / p99\t%s / %s\t\n", ms(ensures.pct(50)+folders.pct(50)), ms(ensures.pct(99)+folders.pct(99)))
	fmt.Fprintf(tw, "  of which host folders (Prepare): p50 / p99\t%s / %s\t\n", ms(folders.pct(50)), ms(folders.pct(99)))
	fmt.Fprintf(tw, "CPU per open: dockerd / containerd / its shim and runc\t%s / %s / %s\t\n", ms(cpu.dockerd/time.Duration(opened)), ms(cpu.containerd/time.Duration(opened)), ms(ownShims/time.Duration(n)))
	if bare != nil {
		k := time.Duration(bare.n)
		fmt.Fprintf(tw, "baseline: CPU per bare container, the same\t%s / %s / %s\t\n", ms(bare.cpu.dockerd/k), ms(bare.cpu.containerd/k), ms(bare.shimCPU))
	}
	fmt.Fprintf(tw, "CPU per open: its container's own processes (runc init, the agent's start)\t%s\t\n", ms(own/time.Duration(n)))
	if bare != nil {
		fmt.Fprintf(tw, "baseline: CPU per bare container, its own processes (runc init, sleep)\t%s\t\n", ms(bare.own))
	}
	fmt.Fprintf(tw, "CPU per open: threadbox / everything else on the host (other work too)\t%s / %s\t\n", ms(cpu.self/time.Duration(opened)), ms(cpu.other(ownShims+own)/time.Duration(opened)))
	fmt.Fprintf(tw, "host CPUs busy while opening\t%.0f%% of %d\t\n", 100*cpu.busy.Seconds()/(openTime.Seconds()*float64(runtime.NumCPU())), runtime.NumCPU())
	fmt.Fprintf(tw, "first command (true) of the last one; median / max of the last %d\t%s; %s / %s\t\n", len(firsts.d), ms(first), ms(firsts.pct(50)), ms(firsts.pct(100)))
	fmt.Fprintf(tw, "cgroup memory per idle sandbox (usage / rss)\t%s / %s\t\n", per(cg), per(cgRSS))
	fmt.Fprintf(tw, "containerd shim PSS per idle sandbox\t%s\t\n", per(shim))
	perSec := func(d time.Duration) string {
		return fmt.Sprintf("%.1f µs/s", float64(d.Microseconds())/float64(n)/idleWindow.Seconds())
	}
	fmt.Fprintf(tw, "CPU of an idle sandbox over %s: its cgroup / its shim\t%s / %s\t\n", idleWindow, perSec(idleCg), perSec(idleShim))
	if bare != nil {
		fmt.Fprintf(tw, "baseline: bare container's cgroup + shim PSS + daemons' growth\t%s + %s + %s\t\n", kib(bare.cgroup), kib(bare.shim), kib(bare.daemons))
	}
	fmt.Fprintf(tw, "dockerd + containerd PSS growth\t%s (%s per sandbox)\t\n", kib(daemons), per(daemons))
	fmt.Fprintf(tw, "host memory in all (cgroups + shims + daemons' growth)\t%s\t\n", kib(cg+shim+daemons))
	fmt.Fprintf(tw, "host MemAvailable drop (other sessions add noise)\t%s\t\n", kib(avail0-avail1))
	fmt.Fprintf(tw, "threadbox-side RSS: before / with %d open\t%s / %s\t\n", opened, kib(rss0<<10), kib(rss1<<10))
	fmt.Fprintf(tw, "threadbox-side goroutines / open files per sandbox\t%.1f / %.1f (open files %d of %d allowed)\t\n", float64(g1-g0)/float64(opened), float64(fd1-fd0)/float64(opened), fd1, nofile.Cur)
	if err := tw.Flush(); err != nil {
		return err
	}
	mem := (cg + shim + daemons) * int64(o.density.n) / n
	fmt.Fprintf(out, "targets: %d idle sandboxes with <= 4 GiB of host memory in all (measured %s, %.2fx the target), threadbox RSS <= 200 MiB (measured %s, %.2fx)\n",
		o.density.n, kib(mem), float64(mem)/densityTargetMem, kib(rss1<<10), float64(rss1<<10)/densityTargetRSS)
	fmt.Fprintf(out, "targets: opened in <= %s (measured %s, %.2fx the target", densityTargetOpen, openTime.Round(time.Millisecond), openTime.Seconds()/densityTargetOpen.Seconds())
	if bare != nil {
		floor := bare.took * time.Duration(opened) / time.Duration(bare.n)
		fmt.Fprintf(out, "; %.2fx the bare create + start of as many at the baseline's rate, %s", openTime.Seconds()/floor.Seconds(), floor.Round(time.Millisecond))
		// The Docker stack's CPU for as many bare containers, spread over
		// every CPU of the host with nothing else running: no open of
		// a Docker container can beat it on this host.
		perBare := (bare.cpu.dockerd+bare.cpu.containerd)/time.Duration(bare.n) + bare.shimCPU
		cpuFloor := perBare * time.Duration(opened) / time.Duration(runtime.NumCPU())
		fmt.Fprintf(out, "; the Docker stack's CPU for as many bare containers over %d CPUs: %s, %.2fx the target", runtime.NumCPU(), cpuFloor.Round(time.Millisecond), cpuFloor.Seconds()/densityTargetOpen.Seconds())
	}
	fmt.Fprintf(out, "), first command of the last ones <= 5 ms (median of %d: %s, %.2fx)\n\n", len(firsts.d), ms(firsts.pct(50)), firsts.pct(50).Seconds()/densityTargetFirst.Seconds())
	fmt.Fprintln(os.Stderr, "bench: density: removing")
	return nil
}

// removeStaleDensityData removes the data folders of earlier density runs
// whose process is gone (killed before its own removal ran); their
// containers go with removeStaleSandboxes.
func removeStaleDensityData() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "threadbox-bench*-density-*"))
	for _, dir := range dirs {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(dir), "threadbox-bench%d-", &pid); err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// removeDensity removes every container of the section's instance and of
// its baseline, even when ctx was cancelled (an interrupt). A daemon
// loaded by a thousand removals may take longer than one round's 10
// minutes, so a round that ran out of time is followed by another, up to
// three each.
func removeDensity(ctx context.Context, instance string) {
	fmt.Fprintln(os.Stderr, "bench: density: removing the section's containers")
	for _, inst := range []string{instance, instance + "-bare"} {
		for round := 1; ; round++ {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
			err := docker.RemoveInstance(rctx, inst)
			cancel()
			if err == nil {
				break
			}
			if !errors.Is(err, context.DeadlineExceeded) || round == 3 {
				fmt.Fprintln(os.Stderr, "bench: density: removing:", err)
				break
			}
			fmt.Fprintln(os.Stderr, "bench: density: still removing after", round*10, "minutes")
		}
	}
}

// openConcurrently calls open for 0..n-1 with up to parallel calls in
// flight, and stops starting new ones at the first error or when ctx ends.
// It returns how many succeeded and the time they took.
func openConcurrently(ctx context.Context, what string, n, parallel int, open func(context.Context, int) error) (int, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
	)
	start := time.Now()
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := open(ctx, i); err != nil {
					cancel(fmt.Errorf("open %d: %w", i, err))
					return
				}
				if d := done.Add(1); d%100 == 0 {
					fmt.Fprintf(os.Stderr, "bench: %s: %d open after %s\n", what, d, time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	return int(done.Load()), time.Since(start), context.Cause(ctx)
}

// densityBare is the baseline: bare containers of the same image created
// and started through the Engine API, with no folders, agent or attach.
type densityBare struct {
	n                     int
	took                  time.Duration
	cpu                   cpuTimes      // while opening them
	shimCPU               time.Duration // per container, its own shim's
	own                   time.Duration // per container, its control group's
	cgroup, shim, daemons int64         // per container
}

// benchBare opens n bare containers (the image's sleep, network none, the
// same labels so that the removal finds them), reads their memory and
// removes them before the section's own sandboxes open.
func benchBare(ctx context.Context, o opts, instance string, n, parallel int) (*densityBare, error) {
	be, err := docker.New(docker.Config{Settings: boxes.Settings{Instance: instance}, Image: o.image, Runtime: o.runtime})
	if err != nil {
		return nil, err
	}
	defer be.Close()
	fmt.Fprintf(os.Stderr, "bench: density: baseline: %d bare containers, %d at a time\n", n, parallel)
	daemons0 := daemonPSS()
	cpu0 := cpuNow()
	opened, took, err := openConcurrently(ctx, "density baseline", n, parallel, func(ctx context.Context, i int) error {
		return be.StartBare(ctx, fmt.Sprintf("%04d", i))
	})
	cpu := cpuNow().since(cpu0)
	if err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	daemons := daemonPSS() - daemons0
	ids := instanceContainers(ctx, instance)
	cg, _, shim := containersMemory(ids)
	ownShims := shimCPU(ids)
	own := containersCPU(ids)
	k := int64(max(len(ids), 1))
	if err := docker.RemoveInstance(context.WithoutCancel(ctx), instance); err != nil {
		return nil, err
	}
	return &densityBare{n: opened, took: took, cpu: cpu, shimCPU: ownShims / time.Duration(k), own: own / time.Duration(k), cgroup: cg / k, shim: shim / k, daemons: daemons / k}, nil
}

// containersMemory sums the memory cgroups' usage and rss and the shims'
// PSS of the containers ids.
func containersMemory(ids []string) (cg, cgRSS, shim int64) {
	for _, id := range ids {
		u, r := cgroupMemory(id)
		cg += u
		cgRSS += r
	}
	return cg, cgRSS, shimRSS(ids)
}

// lats collects durations from concurrent callers.
type lats struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *lats) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *lats) pct(p int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// openFiles counts this process's open file descriptors.
func openFiles() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// cpuTimes is CPU time spent so far by the parties of a container's boot
// that outlive it: the Docker daemon, containerd, this process, and the
// whole host. Shims come and go with other work's containers; shimCPU
// reads a run's own.
type cpuTimes struct {
	dockerd, containerd, self, busy time.Duration
}

func (c cpuTimes) since(a cpuTimes) cpuTimes {
	return cpuTimes{c.dockerd - a.dockerd, c.containerd - a.containerd, c.self - a.self, c.busy - a.busy}
}

// other is the host's busy time not spent by the named parties, nor by
// shims (the run's own, shims).
func (c cpuTimes) other(shims time.Duration) time.Duration {
	return max(c.busy-c.dockerd-c.containerd-c.self-shims, 0)
}

// cpuNow reads the CPU times of the parties from /proc.
func cpuNow() cpuTimes {
	const tick = 10 * time.Millisecond
	var c cpuTimes
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		comm, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "comm"))
		name := strings.TrimSpace(string(comm))
		switch {
		case filepath.Base(filepath.Dir(p)) == self:
			c.self += statCPU(p)
		case name == "dockerd":
			c.dockerd += statCPU(p)
		case name == "containerd":
			c.containerd += statCPU(p)
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			c.busy += time.Duration(n) * tick
		}
	}
	return c
}

// daemonPSS sums the proportional set size of dockerd and containerd.
func daemonPSS() int64 {
	var sum int64
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if c := strings.TrimSpace(string(b)); c == "dockerd" || c == "containerd" {
			if kb, err := procStatusLine(filepath.Join(filepath.Dir(p), "smaps_rollup"), "Pss"); err == nil {
				sum += kb << 10
			}
		}
	}
	return sum
}

// instanceContainers lists the full Docker ids of an instance's containers.
func instanceContainers(ctx context.Context, instance string) []string {
	b, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--no-trunc", "--filter", "label="+docker.LabelInstance+"="+instance).Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// idleWindow is how long the density section watches the idle sandboxes'
// CPU.
const idleWindow = 10 * time.Second

// containersCPU sums the CPU time the control groups of ids have used.
func containersCPU(ids []string) time.Duration {
	var sum time.Duration
	for _, id := range ids {
		sum += cgroupCPU(id)
	}
	return sum
}

// cgroupCPU reads the CPU time container id's control group has used:
// cpuacct.usage (nanoseconds) under cgroup v1, cpu.stat's usage_usec under
// v2.
func cgroupCPU(id string) time.Duration {
	for _, dir := range []string{"/sys/fs/cgroup/cpuacct/docker/" + id, "/sys/fs/cgroup/cpu,cpuacct/docker/" + id} {
		if b, err := os.ReadFile(dir + "/cpuacct.usage"); err == nil {
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(ns)
		}
	}
	return time.Duration(statField("/sys/fs/cgroup/system.slice/docker-"+id+".scope/cpu.stat", "usage_usec")) * time.Microsecond
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
	var sum int64
	eachShim(ids, func(dir string) {
		// Pss: the shims share their binary's pages, which RSS would
		// count once per shim.
		if kb, err := procStatusLine(filepath.Join(dir, "smaps_rollup"), "Pss"); err == nil {
			sum += kb << 10
		}
	})
	return sum
}

// shimCPU sums the CPU time of the containerd shims serving ids since they
// started, with that of the runc processes they ran and reaped: what each
// container cost its shim, whatever other containers' shims did meanwhile.
func shimCPU(ids []string) time.Duration {
	var sum time.Duration
	eachShim(ids, func(dir string) { sum += statCPU(filepath.Join(dir, "stat")) })
	return sum
}

// eachShim calls f with the /proc folder of each containerd shim serving
// one of ids.
func eachShim(ids []string, f func(dir string)) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a == "-id" && i+1 < len(args) && want[args[i+1]] {
				f(filepath.Dir(p))
			}
		}
	}
}

// statCPU reads a /proc/PID/stat's CPU time: its own and that of the
// children it reaped (fields 14-17, in clock ticks of 10 ms).
func statCPU(path string) time.Duration {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
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
