package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestMain removes the agent binary the tests built once they end.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// These tests run real gVisor sandboxes. They need root, runsc and the
// sandbox root filesystem (THREADBOX_ROOTFS or the cache of
// sandbox/build-offline.sh, as the local backend's). Under CI=true a
// missing prerequisite fails them; otherwise they skip.

// prerequisites fails or skips the test unless runsc sandboxes can run here.
func prerequisites(t testing.TB) (rootfs, agentBin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "gvisor backend tests need root (runsc, loop quota)")
	}
	if _, err := exec.LookPath(DefaultRunsc); err != nil {
		sandboxtest.Need(t, "runsc not installed: %v", err)
	}
	rootfs = local.FindRootFS(os.Getenv)
	if rootfs == "" {
		sandboxtest.Need(t, "no sandbox root filesystem (set THREADBOX_ROOTFS or run sandbox/build-offline.sh --rootfs-only)")
	}
	return rootfs, sandboxtest.AgentBin(t)
}

// newTestBackend returns a backend on an instance and state folder of its
// own, closed at the end of the test, after which nothing of it may be
// left: no runsc container, runsc process or control group.
func newTestBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	rootfs, bin := prerequisites(t)
	if cfg.RootFS == "" {
		cfg.RootFS = rootfs
	}
	if cfg.AgentBin == "" {
		cfg.AgentBin = bin
	}
	if cfg.Instance == "" {
		cfg.Instance = fmt.Sprintf("test%d", time.Now().UnixNano())
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if tt, ok := t.(*testing.T); ok && cfg.Logger == nil {
		cfg.Logger = sandboxtest.Logger(tt)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Available(ctx); err != nil {
		sandboxtest.Need(t, "gvisor backend not available: %v", err)
	}
	sandboxtest.Cleanup(t, func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		assertNothingLeft(t, b)
	})
	return b
}

// assertNothingLeft fails the test when anything of b outlives its Close:
// a runsc container in its state folder, a runsc process naming that
// folder, or a control group of its instance.
func assertNothingLeft(t testing.TB, b *Backend) {
	t.Helper()
	if out, err := exec.Command(b.cfg.Runsc, "--root", b.state, "list", "-quiet").CombinedOutput(); err == nil && strings.TrimSpace(string(out)) != "" {
		t.Errorf("runsc containers left: %s", out)
	}
	if out, _ := exec.Command("pgrep", "-f", "--", "--root "+b.state).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("runsc processes left: %s", out)
	}
	left, _ := filepath.Glob(filepath.Join(b.cfg.CgroupRoot, "*", "threadbox-gvisor", "*"+b.cfg.Instance+"*"))
	if v2, _ := filepath.Glob(filepath.Join(b.cfg.CgroupRoot, "threadbox-gvisor", "*"+b.cfg.Instance+"*")); len(v2) > 0 {
		left = append(left, v2...)
	}
	if len(left) > 0 {
		t.Errorf("control groups left: %v", left)
	}
	if _, err := os.Stat(filepath.Dir(b.state)); err == nil {
		t.Errorf("state folder left: %s", filepath.Dir(b.state))
	}
	if _, err := os.Stat(b.cfg.PoolDir); err == nil {
		t.Errorf("views folder left: %s", b.cfg.PoolDir)
	}
}

// TestConformance runs the backend conformance suite against gVisor
// sandboxes driven by runsc: every limit is enforced (memory by the
// control group, whose kill takes the whole sandbox down).
func TestConformance(t *testing.T) {
	newBackend := func(t *testing.T) sandbox.Backend { return newTestBackend(t, Config{}) }
	caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: true, CPU: true}
	sandboxtest.Run(t, newBackend, caps)
}
