package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/sandbox/slot"
)

// poolTestBackend returns a backend with a warm pool folder; every slot
// under it is gone when the test ends.
func poolTestBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	pool := t.TempDir()
	t.Cleanup(func() {
		if err := slot.Clean(pool); err != nil {
			t.Errorf("slots left: %v", err)
		}
	})
	cfg.PoolDir = pool
	return newTestBackend(t, cfg)
}

var warmSeq atomic.Int64

// claimingJails boots every jail of the conformance suite as the warm
// pool does: a warm jail with no folders first, then claimed.
type claimingJails struct{ *Backend }

func (c claimingJails) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if st, err := c.Status(ctx, spec.ID); err == nil && st.State == sandbox.StateRunning {
		return nil
	}
	name := fmt.Sprintf("warm-%d-%d", os.Getpid(), warmSeq.Add(1))
	if err := c.Warm(ctx, sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets(), Limits: spec.Limits, Env: spec.Env}); err != nil {
		return err
	}
	if err := c.Claim(ctx, name, spec); err != nil {
		_ = c.Remove(ctx, name)
		return err
	}
	return nil
}

// TestConformanceClaimed runs the conformance suite on jails claimed from
// the warm pool.
func TestConformanceClaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	newBackend := func(t *testing.T) sandbox.Backend { return claimingJails{poolTestBackend(t, Config{})} }
	probe := newTestBackend(t, Config{})
	sandboxtest.Run(t, newBackend, capsOf(probe))
}

// TestClaimedJailIsolation: a claimed jail sees only its claimant's
// folders, none of another container's files or of a previous claimant's
// processes, environment or /tmp, and is never claimed twice.
func TestClaimedJailIsolation(t *testing.T) {
	be := poolTestBackend(t, Config{})
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	env := []string{"POOL_ENV=same"}
	claim := func(slotName, id string) {
		t.Helper()
		t.Cleanup(func() { _ = be.Remove(ctx, id); _ = be.Remove(ctx, slotName); _ = dirs.Remove(ctx, id) })
		if err := be.Warm(ctx, sandbox.Spec{ID: slotName, Mounts: sandbox.FolderTargets(), Env: env}); err != nil {
			t.Fatalf("warm %s: %v", slotName, err)
		}
		d, err := dirs.Prepare(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Claim(ctx, slotName, sandbox.Spec{ID: id, Mounts: d.Mounts(), Env: env}); err != nil {
			t.Fatalf("claim %s for %s: %v", slotName, id, err)
		}
	}
	run := func(id, script string) string {
		t.Helper()
		r, err := be.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("%s: %q: %v", id, script, err)
		}
		return strings.TrimSpace(string(r.Stdout) + string(r.Stderr))
	}
	a, b := fmt.Sprintf("iso-a-%d", time.Now().UnixNano()), fmt.Sprintf("iso-b-%d", time.Now().UnixNano())
	claim("warm-iso-1", a)
	if got := run(a, "echo secret > secret-of-a.txt; echo tmp > /tmp/left-by-a; cat secret-of-a.txt"); got != "secret" {
		t.Fatalf("a: %q", got)
	}
	if _, err := os.Stat(dirs.Dirs(a).Workspace + "/secret-of-a.txt"); err != nil {
		t.Fatalf("a's file is not in a's host folder: %v", err)
	}
	if err := be.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := be.Claim(ctx, "warm-iso-1", sandbox.Spec{ID: b, Mounts: dirs.Dirs(b).Mounts(), Env: env}); err == nil {
		t.Fatal("a warm jail was claimed a second time")
	}
	claim("warm-iso-2", b)
	for script, want := range map[string]string{
		"find / -xdev -name secret-of-a.txt 2>/dev/null; find /home /mnt /tmp -name secret-of-a.txt 2>/dev/null; echo end": "end",
		"ls -A /tmp; echo end":                "end",
		"echo $POOL_ENV":                      "same",
		"ls -A /home/agent/workspace | wc -l": "0",
		"touch /mnt/user-data/uploads/x 2>/dev/null && echo writable || echo ro": "ro",
		"echo hi > mine.txt && cat mine.txt":                                     "hi",
	} {
		if got := run(b, script); got != want {
			t.Errorf("%s: %q, want %q", script, got, want)
		}
	}
	if _, err := os.Stat(dirs.Dirs(b).Workspace + "/mine.txt"); err != nil {
		t.Errorf("b's file is not in b's host folder: %v", err)
	}
}
