package docker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/sandbox/slot"
)

// poolBackend returns a Docker backend with a warm pool folder, on its own
// instance label; every slot under the folder is gone when the test ends.
func poolBackend(t *testing.T, runtime string) *docker.Backend {
	t.Helper()
	pool := t.TempDir()
	sandboxtest.Cleanup(t, func() {
		if err := slot.Clean(pool); err != nil {
			t.Errorf("slots left: %v", err)
		}
	})
	return backendAt(t, docker.Config{Settings: boxes.Settings{Instance: fmt.Sprintf("pool%d", time.Now().UnixNano())}, Runtime: runtime, SocketDir: t.TempDir(), PoolDir: pool})
}

// TestConformanceClaimed runs the conformance suite on sandboxes claimed
// from the warm pool, under every runtime of SANDBOX_TEST_RUNTIMES that
// supports the pool (runc; needs root). A runtime that cannot (runsc) must
// say so with sandbox.ErrUnsupported, and its containers boot cold.
func TestConformanceClaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "the warm pool binds folders into running sandboxes: needs root")
	}
	for _, rt := range conformanceRuntimes() {
		t.Run(rt, func(t *testing.T) {
			if rt != docker.DefaultRuntime {
				be := poolBackend(t, rt)
				err := be.Warm(context.Background(), sandbox.Spec{ID: "warm-unsupported", Mounts: sandbox.FolderTargets()})
				if !errors.Is(err, sandbox.ErrUnsupported) {
					_ = be.Remove(context.Background(), "warm-unsupported")
					t.Fatalf("warm under %s: %v, want sandbox.ErrUnsupported (its containers boot cold)", rt, err)
				}
				t.Logf("%s: %v", rt, err)
				return
			}
			newBackend := func(t *testing.T) sandbox.Backend { return sandboxtest.Claiming(poolBackend(t, rt)) }
			caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: true, CPU: true}
			sandboxtest.Run(t, newBackend, caps)
		})
	}
}

// TestClaimedSandboxIsolation: a claimed sandbox shows nothing of the
// pool's life or of another claim: not another container's files, not the
// processes, environment or /tmp of the sandbox's previous claimant (a
// warm sandbox is never claimed twice and goes when its claim ends), and
// it serves the folders of the container that claimed it.
func TestClaimedSandboxIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "the warm pool binds folders into running sandboxes: needs root")
	}
	be := poolBackend(t, docker.DefaultRuntime)
	sandboxtest.ClaimedIsolation(t, be)
}

// TestClaimedSandboxIsAdopted: a server restarted while a claimed
// sandbox runs adopts it under its container's id, with its folders and
// its /tmp (the same sandbox); its stop then removes its slot, and a warm
// sandbox nobody claimed is dropped with its slot. Both kinds of id: one
// that is its own Docker name, and one whose name is a hash of it (the id
// is then read from the slot, not from the name); and one whose server
// stopped before the claim's rename reached the Engine (the container
// still has its slot's name: the slot's owner says whose it is).
func TestClaimedSandboxIsAdopted(t *testing.T) {
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "the warm pool binds folders into running sandboxes: needs root")
	}
	for _, tc := range []struct {
		name, id  string
		unrenamed bool
	}{
		{"id is its name", fmt.Sprintf("adopt-%d", time.Now().UnixNano()), false},
		{"name is a hash of the id", fmt.Sprintf("usr_adopt:%d/bench", time.Now().UnixNano()), false},
		{"not renamed yet", fmt.Sprintf("adopt-%d", time.Now().UnixNano()), true},
	} {
		t.Run(tc.name, func(t *testing.T) { claimedSandboxIsAdopted(t, tc.id, tc.unrenamed) })
	}
}

func claimedSandboxIsAdopted(t *testing.T, id string, unrenamed bool) {
	ctx := context.Background()
	pool := t.TempDir()
	cfg := docker.Config{Settings: boxes.Settings{Instance: fmt.Sprintf("pool%d", time.Now().UnixNano())}, Runtime: docker.DefaultRuntime, SocketDir: t.TempDir(), PoolDir: pool}
	first := backendAt(t, cfg)
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	sandboxtest.Cleanup(t, func() {
		_ = docker.RemoveInstance(ctx, cfg.Instance)
		_ = slot.Clean(pool)
		_ = dirs.Remove(ctx, id)
	})
	for _, name := range []string{"warm-adopt-1", "warm-adopt-2", "warm-adopt-3"} {
		if err := first.Warm(ctx, sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets()}); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := dirs.Prepare(ctx, id)
	if err := first.Claim(ctx, "warm-adopt-1", sandbox.Spec{ID: id, Mounts: d.Mounts()}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", "echo kept > kept.txt; echo here > /tmp/still"}}); err != nil {
		t.Fatal(err)
	}
	if names, err := first.WarmSandboxes(ctx); err != nil || !sameNames(names, "warm-adopt-2", "warm-adopt-3") {
		t.Fatalf("warm sandboxes after a claim: %v %v; want the two unclaimed ones", names, err)
	}
	first.Close()
	if unrenamed {
		// As if the server had stopped between the claim and its rename.
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if err := cli.ContainerRename(ctx, first.ContainerName(id), first.ContainerName("warm-adopt-1")); err != nil {
			t.Fatal(err)
		}
	}
	second := backendAt(t, cfg)
	// A later process sees the unclaimed warm sandboxes it did not boot,
	// and removes one with its slot (the pool's bound reaps them so).
	if names, err := second.WarmSandboxes(ctx); err != nil || !sameNames(names, "warm-adopt-2", "warm-adopt-3") {
		t.Fatalf("warm sandboxes seen by a later process: %v %v", names, err)
	}
	if err := second.Remove(ctx, "warm-adopt-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pool, hostdirs.SafeID("warm-adopt-3"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("slot of a removed warm sandbox another process booted: %v", err)
	}
	adopted, removed, err := second.Reconcile(ctx, func(string) sandbox.Verdict { return sandbox.Adopt })
	if err != nil || len(adopted) != 1 || adopted[0] != id || len(removed) != 1 || removed[0] != "warm-adopt-2" {
		t.Fatalf("reconcile: adopted %v removed %v err %v; want %s adopted and the unclaimed warm sandbox removed", adopted, removed, err, id)
	}
	if unrenamed {
		// The adoption gives it its container's name.
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if in, err := cli.ContainerInspect(ctx, second.ContainerName(id)); err != nil || !strings.HasSuffix(in.Name, second.ContainerName(id)) {
			t.Fatalf("adopted claimed sandbox not renamed: %v", err)
		}
	}
	r, err := second.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", "cat kept.txt /tmp/still"}})
	if err != nil || strings.TrimSpace(string(r.Stdout)) != "kept\nhere" {
		t.Fatalf("adopted claimed sandbox: %q %v", r.Stdout, err)
	}
	if names, err := second.WarmSandboxes(ctx); err != nil || len(names) != 0 {
		t.Fatalf("warm sandboxes after the reconcile: %v %v", names, err)
	}
	if err := second.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left, err := docker.Instances(ctx); err != nil || slices.Contains(left, cfg.Instance) {
		t.Fatalf("containers of the instance after the stop: %v %v", left, err)
	}
	if left, _ := os.ReadDir(pool); len(left) != 0 {
		t.Fatalf("slots left after the stop: %v", left)
	}
}

// sameNames reports whether names holds exactly want, in any order.
func sameNames(names []string, want ...string) bool {
	return len(names) == len(want) && !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(names, w) })
}
