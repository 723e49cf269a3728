package local

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"threadbox/domain/sandbox"
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
	sandboxtest.ClaimedIsolation(t, be)
}
