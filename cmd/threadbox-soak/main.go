// Command threadbox-soak drives a threadbox server with simulated users
// over the Workspace API and, through the official Anthropic SDK, the
// Messages API, optionally injecting faults (kill -9, SIGTERM, sandboxes
// killed from outside, a failing model upstream, clients that leave,
// PostgreSQL restarts), then checks that no acknowledged write was lost,
// no turn is left running, no error fell outside the designed ones and
// the host's resources came back. It prints tables and exits 1 when an
// invariant broke.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the soak's configuration, from flags.
type config struct {
	warmPool     int // SANDBOX_WARM_POOL of the server
	users        int
	duration     time.Duration
	think        time.Duration
	seed         uint64
	chaos        bool
	faults       []string // kinds of fault to inject
	faultEvery   time.Duration
	model        string // runner or fake
	databaseURL  string
	pgData       string // PostgreSQL data folder, to restart it
	threadboxBin string
	agentBin     string
	diskQuota    string
	idle         time.Duration
	sweep        time.Duration
	maxAge       time.Duration
	upstreamURL  string // set when model is fake
	settle       time.Duration
	only         map[string]bool // the operations users do; empty is all
	keepLog      string          // where to copy threadbox's log at the end
	dataFS       int64           // size of DATA_DIR's own filesystem; 0 is none
	dockerd      string          // folder of a Docker daemon of the soak's own; "" is the host's
	backend      string          // SANDBOX_BACKEND of the server: docker or gvisor

	// Hooks of the tests that plant what the invariants must catch.
	plantBeforeVerify func(*soak)
	plantBeforeFinal  func(*soak)
}

// allFaults are the faults -chaos injects by default; docker-restart is
// never among them (it restarts a daemon other users may share).
// disk-full (DATA_DIR's filesystem filled for a while) is known but not
// default either: it needs root, and it mounts a filesystem.
var allFaults = []string{"kill9", "sigterm", "docker-kill", "upstream-429", "upstream-529", "upstream-500", "upstream-hang", "upstream-cut", "upstream-fail", "pg-restart"}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("threadbox-soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var faults, only string
	fs.IntVar(&c.users, "users", 20, "simulated users")
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long the load runs")
	fs.DurationVar(&c.think, "think", 2*time.Second, "mean think time between a user's operations")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed (0: from the clock; printed at start)")
	fs.BoolVar(&c.chaos, "chaos", false, "inject faults")
	fs.StringVar(&faults, "faults", strings.Join(allFaults, ","), "faults injected with -chaos (also known, never default: docker-restart restarts the Docker daemon, disk-full fills DATA_DIR's own filesystem)")
	fs.DurationVar(&c.faultEvery, "fault-every", 30*time.Second, "mean time between faults")
	fs.StringVar(&c.model, "model", "", "runner (threadbox's offline model) or fake (the fake upstream running the same code blocks; needed for upstream faults); default fake with -chaos, else runner")
	fs.StringVar(&c.databaseURL, "database-url", "", "postgres:// URL; empty is SQLite")
	fs.StringVar(&c.pgData, "pg-data", "", "PostgreSQL data folder; with it the pg-restart fault restarts the cluster with pg_ctl")
	fs.StringVar(&c.threadboxBin, "threadbox", "bin/threadbox", "threadbox binary")
	fs.StringVar(&c.agentBin, "agent", "bin/threadbox-agent", "in-sandbox agent binary")
	fs.StringVar(&c.diskQuota, "disk-quota", "auto", "SANDBOX_DISK_QUOTA of the server")
	fs.DurationVar(&c.idle, "idle", 15*time.Second, "SANDBOX_IDLE of the server")
	fs.StringVar(&c.backend, "backend", "docker", "SANDBOX_BACKEND of the server: docker, or gvisor (runsc driven directly, sandboxes checkpointed at the idle stop and at shutdown; needs root, runsc and the sandbox root filesystem)")
	fs.DurationVar(&c.sweep, "sweep", 2*time.Second, "SWEEP_INTERVAL of the server")
	fs.DurationVar(&c.maxAge, "max-age", 45*time.Second, "CONTAINER_MAX_AGE of the server (Messages API containers)")
	fs.StringVar(&only, "ops", "", "comma-separated operations users do (e.g. turn,turn-disconnect); empty is the whole mix")
	var dataFS string
	fs.StringVar(&dataFS, "data-fs", "", "put DATA_DIR on a loop-mounted ext4 filesystem of this size (e.g. 1G; needed by the disk-full fault, 1G when it is asked without it)")
	fs.IntVar(&c.warmPool, "warm-pool", 2, "SANDBOX_WARM_POOL of the server (the product's default; its warm sandboxes are counted apart from what must come back)")
	fs.StringVar(&c.dockerd, "private-dockerd", "", "run the sandboxes on a Docker daemon of the soak's own, keeping its state in this folder (the docker-restart fault then restarts it, not the host's daemon)")
	fs.StringVar(&c.keepLog, "keep-log", "", "copy threadbox's log (JSON lines, every start) to this file at the end")
	fs.DurationVar(&c.settle, "settle", 3*time.Minute, "longest wait for the sweeps after the load")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, o := range strings.Split(only, ",") {
		if o = strings.TrimSpace(o); o != "" {
			if c.only == nil {
				c.only = map[string]bool{}
			}
			c.only[o] = true
		}
	}
	if dataFS != "" {
		n, err := parseSize(dataFS)
		if err != nil {
			return c, fmt.Errorf("-data-fs: %w", err)
		}
		c.dataFS = n
	}
	if c.users < 1 || c.duration <= 0 {
		return c, fmt.Errorf("need at least one user and a positive duration")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	if c.model == "" {
		c.model = "runner"
		if c.chaos {
			c.model = "fake"
		}
	}
	if c.model != "runner" && c.model != "fake" {
		return c, fmt.Errorf("-model must be runner or fake")
	}
	if c.backend != "docker" && c.backend != "gvisor" {
		return c, fmt.Errorf("-backend must be docker or gvisor")
	}
	if c.chaos {
		for _, f := range strings.Split(faults, ",") {
			f = strings.TrimSpace(f)
			switch {
			case f == "":
			case strings.HasPrefix(f, "upstream-") && c.model != "fake":
			case f == "pg-restart" && c.pgData == "":
			default:
				c.faults = append(c.faults, f)
			}
			if f == "disk-full" && c.dataFS == 0 {
				c.dataFS = 1 << 30
			}
		}
	}
	for _, p := range []*string{&c.threadboxBin, &c.agentBin} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return c, err
		}
		*p = abs
	}
	return c, nil
}

// parseSize reads a size in bytes with an optional K, M or G suffix.
func parseSize(v string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "K"):
		mult, v = 1<<10, strings.TrimSuffix(v, "K")
	case strings.HasSuffix(v, "M"):
		mult, v = 1<<20, strings.TrimSuffix(v, "M")
	case strings.HasSuffix(v, "G"):
		mult, v = 1<<30, strings.TrimSuffix(v, "G")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	return n * mult, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ok, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "threadbox-soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// checkpoints reports whether the server's backend keeps a sandbox's life
// across its idle stop (a checkpoint), not only its files.
func (c config) checkpoints() bool { return c.backend == "gvisor" }
