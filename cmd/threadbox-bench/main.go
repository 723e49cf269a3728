// Command threadbox-bench measures the Docker sandbox backend in one running
// sandbox and prints a table (`make bench`): a warm `true` through the agent
// vs through `docker exec` (Engine API) vs a host fork/exec of /bin/true,
// 8 concurrent commands through the agent, and a cold boot to the first
// command's result vs `docker run --rm IMAGE true`. The Messages API
// (messages.go), MCP (mcp.go), Files API (files.go), lifecycle (lifecycle.go) and gVisor
// checkpoints (checkpoints.go) sections print their own tables; -only runs
// one section.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
)

func main() {
	// An interrupt cancels the sections' context, so each removes what it
	// made before the process ends; a second one kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "threadbox-bench:", err)
		os.Exit(1)
	}
}

type opts struct {
	agentBin  string
	image     string
	runtime   string
	n         int
	nDocker   int
	nCold     int
	only      string        // "sandbox", "files", "messages", "mcp", "lifecycle", "live", "density", "replicas", "credentials", "snapshots", "checkpoints", "microvm", "egress" or "" for every section
	ckptN     int           // rounds of the checkpoints section (checkpoints.go)
	vmN       int           // boots of the microvm section (microvm.go)
	files     filesOpts     // the Files API section (files.go)
	messages  messagesOpts  // the Messages API section (messages.go)
	lifecycle lifecycleOpts // the lifecycle section (lifecycle.go)
	live      liveOpts      // the live turns section (live.go)
	density   densityOpts   // the density section (density.go)
	replicas  replicasOpts  // the replicas section (replicas.go)
	mcp       mcpOpts       // the MCP section (mcp.go)

	rootfs string // the local backend's root filesystem; "" skips its rows
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("threadbox-bench", flag.ContinueOnError)
	var o opts
	fs.StringVar(&o.agentBin, "agent", envOr("THREADBOX_AGENT_BIN", "bin/threadbox-agent"), "host path of the agent binary")
	fs.StringVar(&o.image, "image", envOr("SANDBOX_IMAGE", docker.DefaultImage), "sandbox image")
	fs.StringVar(&o.runtime, "runtime", envOr("SANDBOX_RUNTIME", docker.DefaultRuntime), "OCI runtime: runc or runsc")
	fs.IntVar(&o.n, "n", 300, "warm round trips per method")
	fs.IntVar(&o.nDocker, "n-docker", 40, "docker exec round trips")
	fs.IntVar(&o.nCold, "n-cold", 5, "cold boots per method")
	fs.StringVar(&o.rootfs, "rootfs", envOr("THREADBOX_ROOTFS", defaultRootFS()), "root filesystem of the local backend (empty skips its rows)")
	fs.StringVar(&o.only, "only", "", "run one section: sandbox, files, messages, mcp, lifecycle, live, density, replicas, credentials, snapshots, checkpoints, microvm or egress")
	fs.IntVar(&o.vmN, "microvm-n", 5, "boots of the microvm section")
	fs.IntVar(&o.mcp.n, "mcp-n", 200, "round trips per MCP row")
	fs.IntVar(&o.ckptN, "checkpoint-n", 10, "rounds of the checkpoints section (cold boot, checkpoint, restore)")
	fs.IntVar(&o.density.n, "density", 1000, "idle sandboxes the density section opens")
	fs.IntVar(&o.density.parallel, "density-parallel", 4, "sandboxes the density section opens at once")
	fs.IntVar(&o.density.bare, "density-bare", 200, "bare containers of the density section's baseline (0 skips it)")
	fs.StringVar(&o.replicas.databaseURL, "replicas-database-url", envOr("TEST_DATABASE_URL", ""), "PostgreSQL server of the replicas section's throwaway database (empty skips it)")
	fs.IntVar(&o.replicas.n, "replicas-n", 2000, "requests per replicas row at concurrency 16")
	fs.StringVar(&o.files.threadboxBin, "threadbox", "bin/threadbox", "the threadbox server binary (files section)")
	fs.Int64Var(&o.files.size, "files-size", 256<<20, "bytes per Files API transfer")
	fs.IntVar(&o.files.runs, "files-runs", 3, "Files API transfers per row")
	fs.IntVar(&o.messages.n, "messages-n", 400, "requests per Messages API latency row")
	fs.StringVar(&o.messages.rows, "messages-rows", "", "run only the Messages API latency rows whose name contains this (for profiling one row)")
	fs.IntVar(&o.messages.loops, "messages-loops", 100, "paired rounds of the Messages API tool-loop row")
	fs.IntVar(&o.messages.iters, "messages-iters", 5, "tool iterations per tool-loop request")
	fs.StringVar(&o.messages.procs, "messages-procs", "", "THREADBOX_PROCS of the Messages API server (default: its own)")
	fs.IntVar(&o.lifecycle.n, "lifecycle-n", 300, "containers created, used once and expired in the lifecycle section")
	fs.IntVar(&o.lifecycle.concurrency, "lifecycle-concurrency", 4, "lifecycle requests in flight at once")
	fs.DurationVar(&o.lifecycle.maxAge, "lifecycle-max-age", 5*time.Second, "CONTAINER_MAX_AGE of the lifecycle server")
	fs.DurationVar(&o.lifecycle.sweep, "lifecycle-sweep", 500*time.Millisecond, "SWEEP_INTERVAL of the lifecycle server")
	fs.DurationVar(&o.lifecycle.idle, "lifecycle-idle", time.Second, "SANDBOX_IDLE of the lifecycle server")
	fs.Int64Var(&o.lifecycle.diskBytes, "lifecycle-disk", 64<<20, "SANDBOX_DISK_BYTES of the lifecycle server")
	fs.DurationVar(&o.lifecycle.timeout, "lifecycle-timeout", 20*time.Minute, "bound of the whole lifecycle section")
	fs.IntVar(&o.live.lines, "live-lines", 100, "lines of the live output command, 100 ms apart")
	fs.IntVar(&o.live.followers, "live-followers", 50, "followers of the live section's flood turn")
	fs.Int64Var(&o.live.flood, "live-flood", 10<<20, "bytes the live section's flood command prints")
	floorAddr := fs.String("floor-proxy", "", "run as the Messages API section's bare proxy on this address (internal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *floorAddr != "" {
		return serveFloorProxy(*floorAddr)
	}
	switch o.only {
	case "", "sandbox", "files", "messages", "mcp", "lifecycle", "live", "density", "replicas", "credentials", "snapshots", "checkpoints", "microvm", "egress":
	default:
		return fmt.Errorf("-only %q is not sandbox, files, messages, mcp, lifecycle, live, density, replicas, credentials, snapshots, checkpoints, microvm or egress", o.only)
	}
	want := func(section string) bool { return o.only == "" || o.only == section }
	if want("credentials") {
		if err := benchCredentials(ctx, 50, out); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
	}
	if want("egress") {
		if err := benchEgress(ctx, 200, out); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
	}
	if want("snapshots") {
		if err := benchSnapshots(ctx, 20, out); err != nil {
			return fmt.Errorf("snapshots: %w", err)
		}
	}
	if o.only != "microvm" && o.only != "snapshots" && o.only != "egress" { // these sections use no Docker
		removeStaleSandboxes(ctx)
	}
	if want("messages") {
		if err := benchMessages(ctx, o, out); err != nil {
			return fmt.Errorf("messages: %w", err)
		}
	}
	if want("mcp") {
		if err := benchMCP(ctx, o, out); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	if want("replicas") {
		if err := benchReplicas(ctx, o, out); err != nil {
			return fmt.Errorf("replicas: %w", err)
		}
	}
	if want("live") {
		if err := benchLive(ctx, o, out); err != nil {
			return fmt.Errorf("live: %w", err)
		}
	}
	if want("lifecycle") {
		if err := benchLifecycle(ctx, o, out); err != nil {
			return fmt.Errorf("lifecycle: %w", err)
		}
	}
	if want("density") {
		if err := benchDensity(ctx, o, out); err != nil {
			return fmt.Errorf("density: %w", err)
		}
	}
	if want("files") {
		if err := benchFiles(ctx, o.files, out); err != nil {
			return fmt.Errorf("files: %w", err)
		}
	}
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return err
	}
	if want("checkpoints") {
		if err := benchCheckpoints(ctx, agentBin, o.image, o.ckptN, out); err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
	}
	if want("microvm") {
		if err := benchMicroVM(ctx, o, agentBin, o.vmN, out); err != nil {
			return fmt.Errorf("microvm: %w", err)
		}
	}
	if !want("sandbox") {
		return nil
	}
	const id = "bench"
	be, done, err := benchSandbox(ctx, o, agentBin, id)
	if err != nil {
		return err
	}
	defer done()
	trueCmd := sandbox.Command{Args: []string{"true"}}
	agentTrue := func() error {
		res, err := be.Exec(ctx, id, trueCmd)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		return err
	}
	// Warm up every path once.
	for range 5 {
		if err := agentTrue(); err != nil {
			return err
		}
	}
	type row struct {
		name     string
		n        int
		p50, p99 time.Duration
	}
	var rows []row
	add := func(name string, d []time.Duration) {
		p50, p99 := percentiles(d)
		rows = append(rows, row{name, len(d), p50, p99})
	}

	fmt.Fprintf(os.Stderr, "bench: agent round trips (%d)\n", o.n)
	d, err := measure(o.n, agentTrue)
	if err != nil {
		return err
	}
	add("agent: true (warm)", d)

	fmt.Fprintf(os.Stderr, "bench: docker exec round trips (%d)\n", o.nDocker)
	d, err = measure(o.nDocker, func() error { return dockerExec(ctx, be, id) })
	if err != nil {
		return err
	}
	add("docker exec: true (Engine API)", d)

	fmt.Fprintf(os.Stderr, "bench: host fork/exec (%d)\n", o.n)
	d, err = measure(o.n, func() error { return exec.Command("/bin/true").Run() })
	if err != nil {
		return err
	}
	add("host fork/exec /bin/true", d)

	fmt.Fprintln(os.Stderr, "bench: 8 concurrent agent commands")
	// Each command's life as the agent measured it (from its start to its
	// exit status) splits the latency: the rest is the host, the frames
	// and the agent's spawn.
	var lifeMu sync.Mutex
	var life []time.Duration
	agentConc := func() error {
		res, err := be.Exec(ctx, id, trueCmd)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		lifeMu.Lock()
		life = append(life, res.Duration)
		lifeMu.Unlock()
		return err
	}
	// Its floor, the same 8 at once as host processes (no sandbox, agent
	// or frames), is measured in the same rounds, taking turns with it, so
	// that the machine's load of the moment weighs on both alike: on this
	// shared machine the host's own p99 moves by 3x between runs.
	hostTrue := func() error { return exec.Command("/bin/true").Run() }
	var hostConc []time.Duration
	d = nil
	for range concRounds {
		dd, err := concurrent(8, max(1, o.n/4/concRounds), agentConc)
		if err != nil {
			return err
		}
		hh, err := concurrent(8, max(1, o.n/4/concRounds), hostTrue)
		if err != nil {
			return err
		}
		d, hostConc = append(d, dd...), append(hostConc, hh...)
	}
	add("agent: true, 8 concurrent", d)

	fmt.Fprintf(os.Stderr, "bench: cold boots (%d)\n", o.nCold)
	// Timed from Ensure to the first command's result; the removal of each
	// sandbox happens after the clock stops.
	var cold []string
	d, err = measure(o.nCold, func() error {
		cid := fmt.Sprintf("cold-%d", time.Now().UnixNano())
		cold = append(cold, cid)
		if err := be.Ensure(ctx, sandbox.Spec{ID: cid}); err != nil {
			return err
		}
		_, err := be.Exec(ctx, cid, trueCmd)
		return err
	}, func() {
		for _, cid := range cold {
			be.Remove(context.WithoutCancel(ctx), cid)
		}
		cold = cold[:0]
	})
	if err != nil {
		return err
	}
	add("cold boot to first result", d)

	d, err = measure(o.nCold, func() error {
		c := exec.Command("docker", "run", "--rm", "--network", "none", "--runtime", o.runtime, o.image, "true")
		if b, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("docker run: %w: %s", err, b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	add("docker run --rm IMAGE true", d)

	// The warm pool: each sandbox is warmed untimed, then timed from the
	// claim (binding the new container's folders) to the first result.
	fmt.Fprintf(os.Stderr, "bench: warm pool claims (%d)\n", o.nCold)
	pool, perr := claimFirst(ctx, be, o.nCold, trueCmd)
	if perr == nil {
		add("warm pool claim to first result", pool)
	} else {
		fmt.Fprintf(os.Stderr, "bench: warm pool: %v\n", perr)
	}

	add("host fork/exec /bin/true, 8 concurrent (same rounds as the agent's)", hostConc)

	if o.rootfs != "" {
		lr, err := benchLocal(ctx, o.rootfs, agentBin, o.n, o.nCold)
		if err != nil {
			return fmt.Errorf("local: %w", err)
		}
		for _, r := range lr {
			add(r.name, r.d)
		}
	}

	// The kubernetes backend's rows, on the test cluster of
	// scripts/k8s-up.sh when THREADBOX_K8S_KUBECONFIG names it.
	if kc := os.Getenv("THREADBOX_K8S_KUBECONFIG"); kc != "" {
		kr, err := benchKubernetes(ctx, kc, o.n, o.nCold)
		if err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
		for _, r := range kr {
			add(r.name, r.d)
		}
	}

	fmt.Fprintf(out, "runtime %s, image %s, %s\n\n", o.runtime, o.image, time.Now().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measurement\tn\tp50\tp99\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", r.name, r.n, ms(r.p50), ms(r.p99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	agent50, exec50, host50 := rows[0].p50, rows[1].p50, rows[2].p50
	life50, life99 := percentiles(life)
	hc50, hc99 := percentiles(hostConc)
	fmt.Fprintf(out, "\n8 concurrent: p99 %s (target <= 25 ms); of which the command's own life as the agent measured it (start to exit status): p50 %s, p99 %s; 8 concurrent host fork/exec in the same rounds: p50 %s, p99 %s; sandbox p99 / host p99 = %.2fx\n",
		ms(rows[3].p99), ms(life50), ms(life99), ms(hc50), ms(hc99), float64(rows[3].p99)/float64(hc99))
	fmt.Fprintf(out, "\nagent p50 / host fork p50 = %.2fx (target <= 1.3x)\n", float64(agent50)/float64(host50))
	fmt.Fprintf(out, "docker exec p50 / agent p50 = %.1fx (target >= 20x)\n", float64(exec50)/float64(agent50))
	fmt.Fprintf(out, "cold boot p50 / docker run p50 = %.2fx (target <= 0.5x)\n", float64(rows[4].p50)/float64(rows[5].p50))
	if perr == nil {
		fmt.Fprintf(out, "warm pool claim p50 = %s (target <= 5 ms under runc); cold boot p50 / claim p50 = %.1fx (target >= 6x)\n",
			ms(rows[6].p50), float64(rows[4].p50)/float64(rows[6].p50))
	} else {
		fmt.Fprintf(out, "warm pool: none (%v): a new container's first command boots cold\n", perr)
	}
	return nil
}

// benchSandbox boots sandbox id on the docker backend set up as threadbox
// sets it up (host folders and the agent socket in a temporary data folder,
// an instance of the bench's own); done removes the sandbox and the folder.
func benchSandbox(ctx context.Context, o opts, agentBin, id string) (be *docker.Backend, done func(), err error) {
	data, err := os.MkdirTemp("", "threadbox-bench-")
	if err != nil {
		return nil, nil, err
	}
	be, err = docker.New(docker.Config{
		Settings: boxes.Settings{Instance: fmt.Sprintf("bench%d-%s", os.Getpid(), id)},
		Image:    o.image, Runtime: o.runtime, AgentBin: agentBin,
		Dirs:      hostdirs.New(data, hostdirs.Options{Quota: hostdirs.QuotaNone}),
		SocketDir: filepath.Join(data, "run"),
		PoolDir:   filepath.Join(data, "pool"),
	})
	if err != nil {
		os.RemoveAll(data)
		return nil, nil, err
	}
	done = func() {
		be.Remove(context.WithoutCancel(ctx), id)
		be.Close()
		os.RemoveAll(data)
	}
	if err := be.Available(ctx); err != nil {
		done()
		return nil, nil, err
	}
	if err := be.Ensure(ctx, sandbox.Spec{ID: id}); err != nil {
		done()
		return nil, nil, err
	}
	return be, done, nil
}

// dockerExec runs `true` in sandbox id through the Engine API's exec
// endpoints and waits for its exit.
func dockerExec(ctx context.Context, be *docker.Backend, id string) error {
	code, err := be.EngineExec(ctx, id, "true")
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("docker exec true exited %d", code)
	}
	return nil
}

// measure times n calls of fn; after, when given, runs untimed after each.
func measure(n int, fn func() error, after ...func()) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		err := fn()
		el := time.Since(t)
		for _, a := range after {
			a()
		}
		if err != nil {
			return nil, err
		}
		d = append(d, el)
	}
	return d, nil
}

// concRounds is how many turns the 8 concurrent agent commands and their
// host floor take each.
const concRounds = 4

// concurrent runs fn each times on each of workers goroutines at once and
// returns every call's duration.
func concurrent(workers, each int, fn func() error) ([]time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := measure(each, fn)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			all = append(all, d...)
		}()
	}
	wg.Wait()
	return all, first
}

// percentiles returns the nearest-rank p50 and p99.
func percentiles(d []time.Duration) (time.Duration, time.Duration) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return at(0.50), at(0.99)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// removeStaleSandboxes removes the sandboxes that earlier benches left when
// they were killed: those of instances named bench<pid>-… whose process is
// gone. Without a daemon there are none.
func removeStaleSandboxes(ctx context.Context) {
	instances, err := docker.Instances(ctx)
	if err != nil {
		return
	}
	for _, inst := range instances {
		var pid int
		if _, err := fmt.Sscanf(inst, "bench%d-", &pid); err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err := docker.RemoveInstance(ctx, inst); err != nil {
			fmt.Fprintln(os.Stderr, "bench: removing sandboxes of an earlier bench:", err)
		}
	}
}

// claimFirst times n first commands of new containers served by warm pool
// sandboxes: each is warmed (untimed, as the pool does in the background),
// then the clock runs from the claim to the first command's result; the
// removal happens after the clock stops.
func claimFirst(ctx context.Context, be sandbox.Backend, n int, cmd sandbox.Command) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for i := range n {
		slot, cid := fmt.Sprintf("warm-bench-%d", i), fmt.Sprintf("claim-%d", time.Now().UnixNano())
		warm := sandbox.Spec{ID: slot, Mounts: sandbox.FolderTargets()}
		if err := be.Warm(ctx, warm); err != nil {
			return nil, err
		}
		t := time.Now()
		err := be.Claim(ctx, slot, sandbox.Spec{ID: cid})
		if err == nil {
			_, err = be.Exec(ctx, cid, cmd)
		}
		d = append(d, time.Since(t))
		be.Remove(context.WithoutCancel(ctx), cid)
		be.Remove(context.WithoutCancel(ctx), slot)
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}
