package main

// The microvm section: the microvm backend (one QEMU microvm machine per
// sandbox) in-process, labelled with the accelerator it ran on: boot to
// the first command's result, a warm VM restored from the template, its
// claim to the first command's result, the agent channel's round trip (a ping over virtio-serial) and a
// warm `true` through it, a checkpoint of a booted VM and its restore to
// the first command's result, and the host memory (PSS of the QEMU process
// and its virtiofsd processes) of an idle VM. With MICROVM_ACCEL unset it uses KVM
// where the backend can, else emulation (tcg), and says why.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/microvm"
	"threadbox/infra/sandbox/sandboxtest"
)

// benchMicroVM prints the microvm table: n boots, 500 pings and execs,
// beside the same boots and execs on the docker backend in the same run.
func benchMicroVM(ctx context.Context, o opts, agentBin string, n int, out io.Writer) error {
	rootfs, guest := defaultRootFS(), microvm.FindGuest(os.Getenv)
	if rootfs == "" || guest == "" {
		fmt.Fprintln(out, "microvm: skipped: no root filesystem (sandbox/build-offline.sh --rootfs-only) or guest (make microvm-guest)")
		return nil
	}
	work, err := os.MkdirTemp("", "threadbox-bench-microvm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	cfg := microvm.Config{
		Settings: boxes.Settings{Instance: fmt.Sprintf("benchvm%d", os.Getpid())}, RootFS: rootfs, Guest: guest, AgentBin: agentBin, Accel: os.Getenv("MICROVM_ACCEL"),
		Kernel: os.Getenv("MICROVM_KERNEL"), StateDir: filepath.Join(work, "state")}
	label := cfg.Accel
	be, err := microvm.New(cfg)
	if err != nil {
		return err
	}
	if err := be.Available(ctx); err != nil && cfg.Accel == "" {
		// No usable accelerator: measured emulated, and labelled so.
		fmt.Fprintf(out, "\nmicrovm: measured emulated: %v\n", err)
		label = "tcg (emulated: no usable KVM here)"
		cfg.Accel = microvm.AccelTCG
		if be, err = microvm.New(cfg); err != nil {
			return err
		}
	}
	defer be.Close()
	if err := be.Available(ctx); err != nil {
		fmt.Fprintf(out, "microvm: skipped: %v\n", err)
		return nil
	}
	if label == "" {
		label = be.Accel()
	}
	dirs := hostdirs.New(filepath.Join(work, "data"), hostdirs.Options{Quota: hostdirs.QuotaNone})
	const id = "bench-vm"
	d, err := dirs.Prepare(ctx, id)
	if err != nil {
		return err
	}
	defer func() { _ = dirs.Remove(context.WithoutCancel(ctx), id) }()
	spec := sandbox.Spec{ID: id, Mounts: d.Mounts(), Limits: sandbox.Limits{MemoryBytes: 512 << 20}}
	trueCmd := sandbox.Command{Args: []string{"true"}, Timeout: 30 * time.Second}
	fmt.Fprintf(os.Stderr, "bench: microvm (%d boots, accelerator %s)\n", n, label)
	var boots []time.Duration
	for range n {
		_ = be.Stop(ctx, id)
		start := time.Now()
		if err := be.Ensure(ctx, spec); err != nil {
			return err
		}
		if _, err := be.Exec(ctx, id, trueCmd); err != nil {
			return err
		}
		boots = append(boots, time.Since(start))
	}
	var pings, execs []time.Duration
	for range 500 {
		start := time.Now()
		if err := be.Ping(ctx, id); err != nil {
			return err
		}
		pings = append(pings, time.Since(start))
	}
	for range 50 {
		start := time.Now()
		if _, err := be.Exec(ctx, id, trueCmd); err != nil {
			return err
		}
		execs = append(execs, time.Since(start))
	}
	time.Sleep(2 * time.Second) // idle
	var pss int64
	for _, pid := range be.PIDs(id) {
		pss += pssKiB(pid)
	}
	// Checkpoints of the booted VM, with a Python process holding 50 MiB
	// (the gVisor checkpoint rows' sandbox): saved and ended, then restored
	// up to the next command's result.
	var saves, restores []time.Duration
	var imageBytes int64
	ckpt := be.Checkpoints(ctx)
	if ckpt.Supported {
		hold := sandbox.Command{Args: []string{"bash", "-c", sandboxtest.Holder}, Timeout: 2 * time.Minute}
		if _, err := be.Exec(ctx, id, hold); err != nil {
			return err
		}
		for i := range n {
			dir := filepath.Join(work, fmt.Sprintf("checkpoint-%d", i))
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			start := time.Now()
			if err := be.Checkpoint(ctx, id, dir); err != nil {
				return err
			}
			saves = append(saves, time.Since(start))
			imageBytes = diskBytes(dir)
			start = time.Now()
			if err := be.Restore(ctx, spec, dir); err != nil {
				return err
			}
			if _, err := be.Exec(ctx, id, trueCmd); err != nil {
				return err
			}
			restores = append(restores, time.Since(start))
			_ = os.RemoveAll(dir)
		}
	}
	_ = be.Stop(ctx, id)
	// The warm pool: a warm VM restored from the template (the first
	// makes the template, untimed), then claimed for the container up to
	// its first command's result.
	warmSpec := func(name string) sandbox.Spec {
		return sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets(), Limits: spec.Limits}
	}
	if err := be.Warm(ctx, warmSpec(sandbox.WarmPrefix+"bench-template")); err != nil {
		return err
	}
	_ = be.Remove(ctx, sandbox.WarmPrefix+"bench-template")
	var clones, claims []time.Duration
	for i := range n {
		name := fmt.Sprintf("%sbench-%d", sandbox.WarmPrefix, i)
		start := time.Now()
		if err := be.Warm(ctx, warmSpec(name)); err != nil {
			return err
		}
		clones = append(clones, time.Since(start))
		start = time.Now()
		if err := be.Claim(ctx, name, spec); err != nil {
			return err
		}
		if _, err := be.Exec(ctx, id, trueCmd); err != nil {
			return err
		}
		claims = append(claims, time.Since(start))
		_ = be.Stop(ctx, id)
	}
	// Host memory of idle warm VMs restored from one template: three at
	// once, each's PSS (the template's pages they share are split among
	// them), and the template's memory file, kept once.
	var clonePSS int64
	for i := range 3 {
		name := fmt.Sprintf("%sbench-idle-%d", sandbox.WarmPrefix, i)
		if err := be.Warm(ctx, warmSpec(name)); err != nil {
			return err
		}
		defer func() { _ = be.Remove(context.WithoutCancel(ctx), name) }()
	}
	time.Sleep(2 * time.Second) // idle
	for i := range 3 {
		clonePSS += pssKiB(be.PID(fmt.Sprintf("%sbench-idle-%d", sandbox.WarmPrefix, i)))
	}
	clonePSS /= 3
	templateKiB := be.TemplateMemoryKiB()
	dockerBoots, dockerExecs, derr := dockerBaseline(ctx, o, agentBin, n, trueCmd)
	b50, b99 := percentiles(boots)
	p50, p99 := percentiles(pings)
	e50, e99 := percentiles(execs)
	fmt.Fprintf(out, "\nmicrovm (QEMU microvm machine, accelerator %s)\n", label)
	fmt.Fprintf(out, "%-52s %12s %12s %s\n", "row", "p50", "p99", "target")
	fmt.Fprintf(out, "%-52s %12s %12s %s\n", "boot to first command", ms(b50), ms(b99), "-")
	r50, r99 := percentiles(clones)
	fmt.Fprintf(out, "%-52s %12s %12s %s\n", "warm VM restored from the template, ready", ms(r50), ms(r99), fmt.Sprintf("p50 <= 300 ms; boot / restore = %.1fx", float64(b50)/float64(r50)))
	c50, c99 := percentiles(claims)
	fmt.Fprintf(out, "%-52s %12s %12s %s\n", "warm pool claim to first command", ms(c50), ms(c99), fmt.Sprintf("boot / claim = %.1fx", float64(b50)/float64(c50)))
	fmt.Fprintf(out, "%-52s %12s %12s %s\n", "agent channel round trip (ping over virtio-serial)", ms(p50), ms(p99), "p50 <= 1 ms")
	fmt.Fprintf(out, "%-52s %12s %12s %s\n", "warm exec round trip (true)", ms(e50), ms(e99), "-")
	if derr != nil {
		fmt.Fprintf(out, "%-52s %12s\n", "docker backend (baseline)", "skipped: "+derr.Error())
	} else {
		d50, d99 := percentiles(dockerBoots)
		x50, x99 := percentiles(dockerExecs)
		fmt.Fprintf(out, "%-52s %12s %12s %s\n", "docker backend: boot to first command (baseline)", ms(d50), ms(d99), fmt.Sprintf("microvm / docker = %.1fx", float64(b50)/float64(d50)))
		fmt.Fprintf(out, "%-52s %12s %12s %s\n", "docker backend: warm exec round trip (baseline)", ms(x50), ms(x99), fmt.Sprintf("microvm / docker = %.1fx", float64(e50)/float64(x50)))
	}
	if ckpt.Supported {
		s50, s99 := percentiles(saves)
		x50, x99 := percentiles(restores)
		fmt.Fprintf(out, "%-52s %12s %12s %s\n", "checkpoint of the VM (Python holding 50 MiB), ended", ms(s50), ms(s99), fmt.Sprintf("%d MiB on disk (RAM and state)", imageBytes>>20))
		fmt.Fprintf(out, "%-52s %12s %12s %s\n", "restore from the checkpoint to first command", ms(x50), ms(x99), fmt.Sprintf("boot / restore = %.1fx", float64(b50)/float64(x50)))
	} else {
		fmt.Fprintf(out, "%-52s %12s\n", "checkpoint of a running VM", ckpt.Reason)
	}
	fmt.Fprintf(out, "%-52s %12s\n", "host memory of an idle VM, booted (QEMU and virtiofsd PSS)", fmt.Sprintf("%d MiB", pss>>10))
	fmt.Fprintf(out, "%-52s %12s\n", "host memory of an idle VM, 1 of 3 from a template", fmt.Sprintf("%d MiB", clonePSS>>10))
	fmt.Fprintf(out, "%-52s %12s\n", "the template's memory file (once)", fmt.Sprintf("%d MiB", templateKiB>>10))
	return nil
}

// dockerBaseline boots a sandbox on the docker backend (runtime as the
// bench's -runtime says) n times up to its first command's result, then
// runs cmd in it 50 times through the agent: the microvm rows' baseline.
func dockerBaseline(ctx context.Context, o opts, agentBin string, n int, cmd sandbox.Command) (boots, execs []time.Duration, err error) {
	const id = "bench-vm-baseline"
	be, done, err := benchSandbox(ctx, o, agentBin, id)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	for range n {
		_ = be.Stop(ctx, id)
		start := time.Now()
		if err := be.Ensure(ctx, sandbox.Spec{ID: id}); err != nil {
			return nil, nil, err
		}
		if _, err := be.Exec(ctx, id, cmd); err != nil {
			return nil, nil, err
		}
		boots = append(boots, time.Since(start))
	}
	for range 50 {
		start := time.Now()
		if _, err := be.Exec(ctx, id, cmd); err != nil {
			return nil, nil, err
		}
		execs = append(execs, time.Since(start))
	}
	return boots, execs, nil
}

// pssKiB reads a process's proportional set size in KiB (0 when unknown).
func pssKiB(pid int) int64 {
	if pid == 0 {
		return 0
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// diskBytes sums the disk space the regular files under dir take (a
// sparse file's holes take none).
func diskBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}
