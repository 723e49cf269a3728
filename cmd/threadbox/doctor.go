package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/store"
)

// check is one prerequisite the doctor looks at.
type check struct {
	name string
	ok   bool
	info string // what was found, or what is wrong
	fix  string // how to fix it, when wrong
}

// cmdDoctor checks what serving needs — the database, the sandbox
// backends (daemon, image, agent, root filesystem), disk quotas, the model
// upstream and the clock — and prints what is wrong and how to fix it. It
// exits non-zero when something is.
func cmdDoctor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("doctor", "doctor\n\nChecks the prerequisites of serve and says how to fix what is missing.", stdout)
	cfg, err := parseAndLoad(fs, args, getenv)
	if err != nil {
		return err
	}
	checks := doctor(ctx, cfg)
	bad := 0
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark, bad = "FAIL", bad+1
		}
		fmt.Fprintf(stdout, "%s %-18s %s\n", mark, c.name, c.info)
		if !c.ok && c.fix != "" {
			fmt.Fprintf(stdout, "     %-18s fix: %s\n", "", c.fix)
		}
	}
	if bad > 0 {
		return fmt.Errorf("doctor: %d of %d checks failed", bad, len(checks))
	}
	return nil
}

// doctor runs every check, each bounded in time.
func doctor(ctx context.Context, cfg Config) []check {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []check

	// The database, and the clock against it.
	db := check{name: "database"}
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DataDir)
	if err == nil {
		defer st.Close()
		err = st.Ready(ctx)
	}
	switch {
	case errors.Is(err, store.ErrPending):
		db.ok, db.info = true, st.Dialect()+", answers; serve applies its pending migrations at start"
	case err != nil:
		db.info = err.Error()
		db.fix = "start the database DATABASE_URL names (or leave DATABASE_URL empty for the embedded SQLite), then `threadbox migrate`"
	default:
		db.ok, db.info = true, st.Dialect()+", migrated"
	}
	out = append(out, db)
	if db.ok {
		clock := check{name: "clock"}
		if dbNow, err := st.Now(ctx); err != nil {
			clock.info = err.Error()
		} else if skew := time.Since(dbNow); skew > 5*time.Second || skew < -5*time.Second {
			clock.info = fmt.Sprintf("this host's clock is %s off the database's", skew.Round(time.Second))
			clock.fix = "synchronise the clocks (NTP): leases and token expiry compare them"
		} else {
			clock.ok, clock.info = true, "within 5 s of the database's"
		}
		out = append(out, clock)
	}

	// The sandbox backends, as serve builds them.
	layout := hostdirs.New(cfg.DataDir, hostdirs.Options{Quota: quotaMode(cfg), DiskBytes: cfg.SandboxDisk})
	backends, closers := newBackends(cfg, layout, slog.New(slog.DiscardHandler))
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	for _, b := range backends {
		c := check{name: "backend " + b.Name()}
		if err := b.Available(ctx); err != nil {
			c.info = err.Error()
			c.fix = backendFix(b.Name())
		} else {
			c.ok, c.info = true, "available ("+b.Isolation()+"); "+checkpointInfo(b.Checkpoints(ctx))
		}
		out = append(out, c)
	}
	if len(backends) == 0 {
		out = append(out, check{name: "sandbox backends", info: "none configured: code execution is off", fix: "set SANDBOX_BACKEND=docker (README)"})
	}

	// Disk quotas.
	q := check{name: "disk quota", ok: true}
	switch mode := quotaMode(cfg); {
	case mode == hostdirs.QuotaLoop:
		q.info = "loop-mounted ext4 per container"
		if _, err := exec.LookPath("mkfs.ext4"); err != nil || os.Geteuid() != 0 {
			q.ok, q.info, q.fix = false, "SANDBOX_DISK_QUOTA=loop needs root and mkfs.ext4", "run as root with e2fsprogs installed, or SANDBOX_DISK_QUOTA=none"
		}
	default:
		q.info = "none: a sandbox may fill the host's disk (SANDBOX_DISK_QUOTA=loop needs root and mkfs.ext4)"
	}
	out = append(out, q)

	// The model upstream.
	m := check{name: "model upstream", ok: true, info: "the offline runner (no upstream)"}
	if cfg.ModelBaseURL != "" {
		m.info = cfg.ModelBaseURL
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.ModelBaseURL, nil)
		cl := &http.Client{Timeout: 5 * time.Second}
		if resp, err := cl.Do(req); err != nil {
			m.ok, m.info = false, fmt.Sprintf("%s is unreachable: %v", cfg.ModelBaseURL, err)
			m.fix = "check MODEL_BASE_URL and that this host can reach it"
		} else {
			resp.Body.Close()
			m.info = fmt.Sprintf("%s answers (HTTP %d)", cfg.ModelBaseURL, resp.StatusCode)
		}
	}
	return append(out, m)
}

// backendFix says how to make a backend available.
func backendFix(name string) string {
	switch name {
	case "docker":
		return "start Docker (scripts/ci-docker.sh installs and starts it with gVisor), build the image with `make sandbox-image` and the agent with `make agent`"
	case "local":
		return "install bubblewrap and build the root filesystem with `sandbox/build-offline.sh --rootfs-only` (docs/backends.md)"
	case "gvisor":
		return "run as root with runsc installed (scripts/ci-docker.sh installs it), build the root filesystem with `sandbox/build-offline.sh --rootfs-only` and the agent with `make agent` (docs/backends.md)"
	case "microvm":
		return "run as root with a usable KVM (or MICROVM_ACCEL=tcg for emulation), build the guest and its QEMU with `make microvm-guest`, the root filesystem with `sandbox/build-offline.sh --rootfs-only` and the agent with `make agent` (docs/microvm.md)"
	case "firecracker":
		return "this build drives QEMU's microvm machine only: use SANDBOX_BACKEND=microvm (docs/microvm.md)"
	case "e2b", "superserve", "blaxel":
		return "a hosted provider's service, which this build does not call: choose a self-hosted backend (docs/backends.md)"
	}
	return "see docs/backends.md"
}

// checkpointInfo says whether a backend keeps its sandboxes' life across a
// stop (checkpoints) or their files only, and why.
func checkpointInfo(c sandbox.CheckpointSupport) string {
	if c.Supported {
		return "checkpoints: " + c.Mechanism
	}
	return "files only across a stop (" + c.Reason + ")"
}
