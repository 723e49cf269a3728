package local

import (
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
	sandboxtest.Cleanup(t, func() {
		if err := slot.Clean(pool); err != nil {
			t.Errorf("slots left: %v", err)
		}
	})
	cfg.PoolDir = pool
	return newTestBackend(t, cfg)
}

// TestConformanceClaimed runs the conformance suite on jails claimed from
// the warm pool.
func TestConformanceClaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	newBackend := func(t *testing.T) sandbox.Backend { return sandboxtest.Claiming(poolTestBackend(t, Config{})) }
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
