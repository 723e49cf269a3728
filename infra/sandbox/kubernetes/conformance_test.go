package kubernetes_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestConformance runs the backend conformance suite (infra/sandboxtest) on
// the single-node test cluster (runc). Memory is a container limit (the
// agent reads the cgroup's OOM counter); processes are bounded by the
// node's podPidsLimit (scripts/k8s-up.sh sets 1024: Kubernetes has no
// per-pod setting); the disk quota is the host folders' loop quota under
// the claims' hostPath volumes.
func TestConformance(t *testing.T) {
	c := newCluster(t)
	run := fmt.Sprintf("conf%d", time.Now().UnixNano()%1e9)
	newBackend := func(t *testing.T) sandbox.Backend { return c.backend(t, run) }
	caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: os.Geteuid() == 0}
	sandboxtest.Run(t, newBackend, caps)
}
