package docker_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestMain removes the agent binary the tests built once they end.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// TestConformance runs the backend conformance suite (infra/sandboxtest)
// against the Docker backend under every runtime of SANDBOX_TEST_RUNTIMES
// (default "runc"; CI sets "runc,runsc"). Under CI=true a missing daemon,
// image or runtime fails it; otherwise it skips.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, rt := range conformanceRuntimes() {
		t.Run(rt, func(t *testing.T) {
			newBackend := func(t *testing.T) sandbox.Backend { return conformanceBackend(t, rt) }
			// Docker enforces memory and pids through cgroups on every
			// runtime; the disk quota is the loop-mounted host folder.
			caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: os.Geteuid() == 0, CPU: true}
			sandboxtest.Run(t, newBackend, caps)
		})
	}
}

func conformanceRuntimes() []string {
	v := os.Getenv("SANDBOX_TEST_RUNTIMES")
	if v == "" {
		v = "runc"
	}
	var out []string
	for _, r := range strings.Split(v, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// conformanceBackend returns a Docker backend on its own instance label.
// The suite hands it explicit mounts, so it has no Dirs of its own.
func conformanceBackend(t *testing.T, runtime string) sandbox.Backend {
	t.Helper()
	return backendAt(t, docker.Config{
		Settings:  boxes.Settings{Instance: fmt.Sprintf("conf%d", time.Now().UnixNano())},
		Runtime:   runtime,
		SocketDir: t.TempDir(),
	})
}

// backendAt returns a Docker backend of cfg with the test's agent and
// logger (a later instance of the same server shares its folders and
// instance). Every container of its instance goes when the test ends, or
// when the test binary reaches its timeout first (sandboxtest.Cleanup).
func backendAt(t *testing.T, cfg docker.Config) *docker.Backend {
	t.Helper()
	cfg.AgentBin = sandboxtest.AgentBin(t)
	cfg.Logger = sandboxtest.Logger(t)
	be, err := docker.New(cfg)
	if err != nil {
		sandboxtest.Need(t, "docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := be.Available(ctx); err != nil {
		be.Close()
		sandboxtest.Need(t, "docker backend (%s) not available: %v", cfg.Runtime, err)
	}
	sandboxtest.Cleanup(t, func() {
		be.Close()
		_ = docker.RemoveInstance(context.Background(), cfg.Instance)
	})
	return be
}
