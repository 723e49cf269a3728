package main

// The checkpoints section: the gvisor backend (runsc driven directly) saves
// an idle sandbox whose Python process holds 50 MiB and restores it, beside
// a cold boot of the same sandbox and `docker start` of a stopped runsc
// container of the sandbox image in the same run. Each round boots the
// sandbox cold up to its first command's result, starts the Python holder,
// checkpoints the idle sandbox (the sandbox ends with it), measures the
// image on disk and the cost of archiving it for the blob store (zstd, as
// stored, against gzip), restores it up to the next command's result (with
// runsc's share of it as the backend logs it: the floor) and checks that
// the holder still answers with its variable, then rewinds to a
// running-state snapshot taken before (the restored sandbox stops and the
// snapshot is restored). Then a warm sandbox is claimed for the same
// container, up to its first command's result.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/checkpoints"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/gvisor"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// Targets of the checkpoints section.
const (
	targetRestoreP50 = 250 * time.Millisecond
	targetClaimP50   = 50 * time.Millisecond
)

// modelTurn is how long the model is taken to answer a request with its
// first tool call in the row of the restore started with the request: a
// short answer of a fast model (a real one takes longer, leaving the
// restore more time).
const modelTurn = 500 * time.Millisecond

// benchCheckpoints prints the checkpoints table: n rounds. image is the
// sandbox image of the `docker start` baseline.
func benchCheckpoints(ctx context.Context, agentBin, image string, n int, out io.Writer) error {
	rootfs := defaultRootFS()
	if rootfs == "" {
		fmt.Fprintln(out, "checkpoints: skipped: no sandbox root filesystem (sandbox/build-offline.sh --rootfs-only)")
		return nil
	}
	work, err := os.MkdirTemp("", "threadbox-bench-ckpt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	instance := fmt.Sprintf("benchckpt%d", os.Getpid())
	floors := &runscTimes{}
	logger := slog.New(floors)
	be, err := gvisor.New(gvisor.Config{Settings: boxes.Settings{Instance: instance, Logger: logger}, RootFS: rootfs, AgentBin: agentBin})
	if err != nil {
		return err
	}
	defer func() {
		_ = be.Close()
		_ = gvisor.RemoveInstance(context.WithoutCancel(ctx), instance)
	}()
	if err := be.Available(ctx); err != nil {
		fmt.Fprintf(out, "checkpoints: skipped: gvisor backend not available: %v\n", err)
		return nil
	}
	dirs := hostdirs.New(filepath.Join(work, "data"), hostdirs.Options{Quota: hostdirs.QuotaNone})
	const id = "bench-ckpt"
	d, err := dirs.Prepare(ctx, id)
	if err != nil {
		return err
	}
	defer func() { _ = dirs.Remove(context.WithoutCancel(ctx), id) }()
	spec := sandbox.Spec{ID: id, Mounts: d.Mounts(), Limits: sandbox.Limits{MemoryBytes: 512 << 20}}
	run := func(script string) (string, error) {
		r, err := be.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: 30 * time.Second})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("%q exited %d: %s", script, r.ExitCode, r.Stderr)
		}
		return strings.TrimSpace(string(r.Stdout)), err
	}
	var cold, ckpt, leftRunning, restore, floor, stops, rewind []time.Duration
	var sizes []time.Duration // image bytes, sorted with the same helper
	packs := map[checkpoints.Codec]*packed{checkpoints.Zstd: {}, checkpoints.Gzip: {}}
	fmt.Fprintf(os.Stderr, "bench: gvisor checkpoints (%d rounds)\n", n)
	for i := range n {
		start := time.Now()
		_ = be.Stop(ctx, id)
		if i > 0 {
			// The sandbox rewound at the end of the round before: restored.
			stops = append(stops, time.Since(start))
		}
		start = time.Now()
		if err := be.Ensure(ctx, spec); err != nil {
			return err
		}
		if _, err := run("true"); err != nil {
			return err
		}
		cold = append(cold, time.Since(start))
		if _, err := run(sandboxtest.Holder); err != nil {
			return err
		}
		// A turn's running-state snapshot: the sandbox goes on.
		running := filepath.Join(work, fmt.Sprintf("running%d", i))
		if err := os.Mkdir(running, 0o700); err != nil {
			return err
		}
		start = time.Now()
		if err := be.CheckpointRunning(ctx, id, running); err != nil {
			return err
		}
		if _, err := run("true"); err != nil {
			return err
		}
		leftRunning = append(leftRunning, time.Since(start))
		image := filepath.Join(work, fmt.Sprintf("image%d", i))
		if err := os.Mkdir(image, 0o700); err != nil {
			return err
		}
		start = time.Now()
		if err := be.Checkpoint(ctx, id, image); err != nil {
			return err
		}
		ckpt = append(ckpt, time.Since(start))
		sizes = append(sizes, time.Duration(hostdirs.TreeBytes(image)))
		for codec, p := range packs {
			if err := p.measure(ctx, codec, image, filepath.Join(work, "unpacked")); err != nil {
				return err
			}
		}
		start = time.Now()
		if err := be.Restore(ctx, spec, image); err != nil {
			return err
		}
		if _, err := run("true"); err != nil {
			return err
		}
		restore = append(restore, time.Since(start))
		floor = append(floor, floors.last())
		if got, err := run(sandboxtest.AskHolder); err != nil || got != "42" {
			return fmt.Errorf("the restored holder answered %q (%v), want 42", got, err)
		}
		if err := os.RemoveAll(image); err != nil {
			return err
		}
		// A rewind to the running-state snapshot: the running sandbox
		// stops and the snapshot is restored, up to the first result.
		start = time.Now()
		if err := be.Stop(ctx, id); err != nil {
			return err
		}
		if err := be.Restore(ctx, spec, running); err != nil {
			return err
		}
		if _, err := run("true"); err != nil {
			return err
		}
		rewind = append(rewind, time.Since(start))
		if got, err := run(sandboxtest.AskHolder); err != nil || got != "42" {
			return fmt.Errorf("the rewound holder answered %q (%v), want 42", got, err)
		}
		if err := os.RemoveAll(running); err != nil {
			return err
		}
	}
	start := time.Now()
	_ = be.Stop(ctx, id)
	stops = append(stops, time.Since(start))

	// The restore started as the request arrives (app/containers.Prewarm),
	// while the model answers: the tool call comes modelTurn later and
	// waits only for what is left of the restore.
	var early []time.Duration
	for i := range n {
		if err := be.Ensure(ctx, spec); err != nil {
			return err
		}
		if _, err := run(sandboxtest.Holder); err != nil {
			return err
		}
		image := filepath.Join(work, fmt.Sprintf("early%d", i))
		if err := os.Mkdir(image, 0o700); err != nil {
			return err
		}
		if err := be.Checkpoint(ctx, id, image); err != nil {
			return err
		}
		restored := make(chan error, 1)
		go func() { restored <- be.Restore(ctx, spec, image) }()
		time.Sleep(modelTurn)
		start := time.Now()
		if err := <-restored; err != nil {
			return err
		}
		if _, err := run("true"); err != nil {
			return err
		}
		early = append(early, time.Since(start))
		if got, err := run(sandboxtest.AskHolder); err != nil || got != "42" {
			return fmt.Errorf("the restored holder answered %q (%v), want 42", got, err)
		}
		_ = be.Stop(ctx, id)
		if err := os.RemoveAll(image); err != nil {
			return err
		}
	}
	e50, e99 := percentiles(early)

	// A template: a booted, empty sandbox checkpointed once, restored as
	// a new sandbox each round (what a gVisor warm pool would do).
	tmplSpec := spec
	tmplSpec.ID = "bench-template"
	if err := be.Ensure(ctx, tmplSpec); err != nil {
		return err
	}
	if _, err := be.Exec(ctx, tmplSpec.ID, sandbox.Command{Args: []string{"true"}, Timeout: 30 * time.Second}); err != nil {
		return err
	}
	tmplDir := filepath.Join(work, "template")
	if err := os.Mkdir(tmplDir, 0o700); err != nil {
		return err
	}
	if err := be.Checkpoint(ctx, tmplSpec.ID, tmplDir); err != nil {
		return err
	}
	var fromTemplate []time.Duration
	for range n {
		start := time.Now()
		if err := be.Restore(ctx, spec, tmplDir); err != nil {
			return err
		}
		if _, err := run("true"); err != nil {
			return err
		}
		fromTemplate = append(fromTemplate, time.Since(start))
		_ = be.Stop(ctx, id)
	}
	t50, t99 := percentiles(fromTemplate)

	// The warm pool: a sandbox booted over an empty view, untimed, then
	// claimed for the container (its folders bound in) up to the first
	// command's result.
	var claims []time.Duration
	for i := range n {
		name := fmt.Sprintf("warm-bench-ckpt-%d", i)
		warm := sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets(), Limits: spec.Limits}
		if err := be.Warm(ctx, warm); err != nil {
			return err
		}
		start := time.Now()
		err := be.Claim(ctx, name, spec)
		if err == nil {
			_, err = run("true")
		}
		claims = append(claims, time.Since(start))
		_ = be.Remove(ctx, id)
		_ = be.Remove(ctx, name)
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: docker start of a stopped runsc container (%d rounds)\n", n)
	starts, startErr := dockerStarts(ctx, image, n)
	w50, w99 := percentiles(claims)
	c50, c99 := percentiles(cold)
	k50, k99 := percentiles(ckpt)
	r50, r99 := percentiles(restore)
	s50, _ := percentiles(sizes)
	fmt.Fprintf(out, "\ngVisor checkpoints (runsc directly: %s; an idle sandbox whose Python holds 50 MiB), %d rounds, %s\n", be.Checkpoints(ctx).Mechanism, n, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "row", "p50", "p99", "target / ratio")
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "cold boot to first result (baseline)", ms(c50), ms(c99), "")
	if startErr != nil {
		fmt.Fprintf(out, "%-58s %12s\n", "docker start to first result (baseline)", "skipped: "+startErr.Error())
	} else {
		d50, d99 := percentiles(starts)
		fmt.Fprintf(out, "%-58s %12s %12s %s\n", "docker start to first result (baseline)", ms(d50), ms(d99),
			fmt.Sprintf("files only, no process state; the restore is %.2fx it", float64(r50)/float64(d50)))
	}
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "checkpoint of the idle sandbox", ms(k50), ms(k99), "")
	l50, l99 := percentiles(leftRunning)
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "checkpoint left running, to the next command's result", ms(l50), ms(l99), "a turn's running-state snapshot")
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "image size on disk", fmt.Sprintf("%.1f MiB", float64(s50)/(1<<20)), "", "")
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "new sandbox restored from a template, to first result", ms(t50), ms(t99), fmt.Sprintf("image %.1f MiB; %.2fx the cold boot", float64(hostdirs.TreeBytes(tmplDir))/(1<<20), float64(t50)/float64(c50)))
	for _, codec := range []checkpoints.Codec{checkpoints.Zstd, checkpoints.Gzip} {
		p := packs[codec]
		p50, p99 := percentiles(p.pack)
		u50, u99 := percentiles(p.unpack)
		z50, _ := percentiles(p.size)
		fmt.Fprintf(out, "%-58s %12s %12s %s\n", "archive ("+string(codec)+"): pack", ms(p50), ms(p99), fmt.Sprintf("%.1f MiB, %.0f%% of the image", float64(z50)/(1<<20), 100*float64(z50)/float64(s50)))
		fmt.Fprintf(out, "%-58s %12s %12s %s\n", "archive ("+string(codec)+"): unpack", ms(u50), ms(u99), "")
	}
	verdict := "met"
	if w50 > targetClaimP50 {
		verdict = "NOT met"
	}
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "warm pool claim to first command's result", ms(w50), ms(w99),
		fmt.Sprintf("p50 <= %s: %s; %.2fx the cold boot", ms(targetClaimP50), verdict, float64(w50)/float64(c50)))
	verdict = "met"
	if r50 > targetRestoreP50 {
		verdict = "NOT met"
	}
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "restore to first command's result", ms(r50), ms(r99),
		fmt.Sprintf("p50 <= %s: %s; %.2fx the cold boot", ms(targetRestoreP50), verdict, float64(r50)/float64(c50)))
	f50, f99 := percentiles(floor)
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "  of which runsc restore, to the agent's answer (floor)", ms(f50), ms(f99),
		fmt.Sprintf("the rest, first command included: %s", ms(r50-f50)))
	st50, st99 := percentiles(stops)
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "stop of a restored sandbox", ms(st50), ms(st99), "")
	verdict = "met"
	w50, w99 = percentiles(rewind)
	if w50 > targetRestoreP50 {
		verdict = "NOT met"
	}
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", "rewind to a running-state snapshot: stop, restore, result", ms(w50), ms(w99),
		fmt.Sprintf("p50 <= %s: %s", ms(targetRestoreP50), verdict))
	verdict = "met"
	if e50 > targetRestoreP50 {
		verdict = "NOT met"
	}
	fmt.Fprintf(out, "%-58s %12s %12s %s\n", fmt.Sprintf("restore started with the request, model %s: tool call's wait", ms(modelTurn)), ms(e50), ms(e99),
		fmt.Sprintf("p50 <= %s: %s", ms(targetRestoreP50), verdict))
	return nil
}

// dockerStarts times n starts of a stopped container of image under runsc
// up to a command's result (`docker start`, then `docker exec … true`): how
// a sandbox product built on Docker resumes a stopped sandbox, its files
// kept and its processes lost. The container is stopped, untimed, between
// rounds, and removed at the end.
func dockerStarts(ctx context.Context, image string, n int) ([]time.Duration, error) {
	docker := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("docker %s: %w: %s", args[0], err, bytes.TrimSpace(b))
		}
		return strings.TrimSpace(string(b)), nil
	}
	id, err := docker("create", "--network", "none", "--runtime", "runsc", "--entrypoint", "sleep", image, "infinity")
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = exec.Command("docker", "rm", "-f", id).CombinedOutput() }()
	var out []time.Duration
	for range n {
		start := time.Now()
		if _, err := docker("start", id); err != nil {
			return nil, err
		}
		if _, err := docker("exec", id, "true"); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
		if _, err := docker("stop", "-t", "0", id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// packed collects the cost of archiving checkpoint images with one codec.
type packed struct{ pack, unpack, size []time.Duration }

// measure packs image with codec into a file, unpacks it into dir, and
// records the times and the archive's size.
func (p *packed) measure(ctx context.Context, codec checkpoints.Codec, image, dir string) error {
	f, err := os.CreateTemp(filepath.Dir(dir), "archive-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	start := time.Now()
	if err := checkpoints.Pack(ctx, image, f, codec); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	p.pack = append(p.pack, time.Since(start))
	n, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	p.size = append(p.size, time.Duration(n))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start = time.Now()
	if err := checkpoints.Unpack(ctx, f, dir); err != nil {
		return err
	}
	p.unpack = append(p.unpack, time.Since(start))
	return nil
}

// runscTimes is a log handler that keeps how long runsc took in each
// restore the gvisor backend logs ("sandbox restored", its "runsc"
// attribute: from runsc's start to the restored agent's answer).
type runscTimes struct {
	mu    sync.Mutex
	times []time.Duration
}

// Enabled takes every record.
func (*runscTimes) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps the runsc time of a restore.
func (r *runscTimes) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "sandbox restored" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "runsc" {
			if d, err := time.ParseDuration(a.Value.String()); err == nil {
				r.mu.Lock()
				r.times = append(r.times, d)
				r.mu.Unlock()
			}
			return false
		}
		return true
	})
	return nil
}

// WithAttrs returns r: the attributes are not needed.
func (r *runscTimes) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r.
func (r *runscTimes) WithGroup(string) slog.Handler { return r }

// last returns the runsc time of the latest restore.
func (r *runscTimes) last() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.times) == 0 {
		return 0
	}
	return r.times[len(r.times)-1]
}
