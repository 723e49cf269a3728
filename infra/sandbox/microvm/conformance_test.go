package microvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestMain removes the agent binary the tests built once they end.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// These tests boot real VMs under QEMU. They need root, the guest
// artefacts with their QEMU (`make microvm-guest`) and the sandbox root
// filesystem (THREADBOX_ROOTFS or the cache of sandbox/build-offline.sh).
// Under CI=true a missing prerequisite fails them; otherwise they skip.
// Without MICROVM_ACCEL they run emulated (tcg): this host kind's KVM is
// PVM, which does not run the stock guest kernel.

// prerequisites fails or skips the test unless VMs can boot here.
func prerequisites(t testing.TB) (rootfs, guest, agentBin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "microvm backend tests need root (QEMU's 9p ownership, loop quota)")
	}
	rootfs = local.FindRootFS(os.Getenv)
	if rootfs == "" {
		sandboxtest.Need(t, "no sandbox root filesystem (set THREADBOX_ROOTFS or run sandbox/build-offline.sh --rootfs-only)")
	}
	guest = FindGuest(os.Getenv)
	if guest == "" {
		sandboxtest.Need(t, "no microVM guest artefacts (run `make microvm-guest`)")
	}
	if GuestQEMU(guest) == "" {
		sandboxtest.Need(t, "the guest artefacts carry no QEMU (rebuild them with `make microvm-guest`)")
	}
	return rootfs, guest, sandboxtest.AgentBin(t)
}

// testAccel is the accelerator of the tests: MICROVM_ACCEL, else tcg.
func testAccel() string {
	if a := os.Getenv("MICROVM_ACCEL"); a != "" {
		return a
	}
	return AccelTCG
}

// newTestBackend returns a backend on an instance and state folder of its
// own, closed at the end of the test, after which nothing of it may be
// left: no QEMU process, no state file.
func newTestBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	rootfs, guest, bin := prerequisites(t)
	if cfg.RootFS == "" {
		cfg.RootFS = rootfs
	}
	if cfg.Guest == "" {
		cfg.Guest = guest
	}
	if cfg.AgentBin == "" {
		cfg.AgentBin = bin
	}
	if cfg.Accel == "" {
		cfg.Accel = testAccel()
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
		sandboxtest.Need(t, "microvm backend not available: %v", err)
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
// a QEMU process of its instance or its state folder.
func assertNothingLeft(t testing.TB, b *Backend) {
	t.Helper()
	if out, _ := exec.Command("pgrep", "-f", "--", "-initrd "+b.dir+"/").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("QEMU processes left: %s", out)
	}
	if _, err := os.Stat(b.dir); err == nil {
		t.Errorf("state folder left: %s", b.dir)
	}
	b.fsdMu.Lock()
	defer b.fsdMu.Unlock()
	for pid := range b.fsdRunning {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		t.Errorf("virtiofsd process %d not waited for after Close: %q", pid, cmd)
	}
}

// fastCases are the suite's cases run by default: each boots a VM or two,
// which takes seconds under emulation. MICROVM_CONFORMANCE=full (`make
// test-microvm`) runs the whole suite, as on a host with KVM.
var fastCases = []string{"Layout", "BashSemantics", "Timeout", "OutputDir", "Isolation", "AgentUnreachable", "MemoryHog"}

// TestConformance runs the conformance suite against microVMs: every limit
// is enforced (memory by the VM's RAM, whose guest kernel kills the
// command; processes by the sandbox user's limit in the guest; disk by the
// host folders' quota; CPU time read from QEMU's process).
func TestConformance(t *testing.T) {
	newBackend := func(t *testing.T) sandbox.Backend { return newTestBackend(t, Config{}) }
	caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: true, CPU: true}
	if testAccel() == AccelTCG {
		// An emulated CPU: Python's first import of pandas took 30 s here.
		caps.CommandTimeout = 3 * time.Minute
	}
	cases := fastCases
	if os.Getenv("MICROVM_CONFORMANCE") == "full" {
		cases = sandboxtest.Cases()
	}
	sandboxtest.RunCases(t, newBackend, caps, cases...)
}
