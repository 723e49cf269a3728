package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/sandboxtest"
)

// timeoutChildEnv holds, for TestTimeoutChild, the instance and image
// ("instance,image") of the sandbox it boots; it is unset in other runs.
const timeoutChildEnv = "THREADBOX_TIMEOUT_CHILD"

// TestTimeoutRemovesSandboxes runs this test binary again with only
// TestTimeoutChild and a 20 s -test.timeout: the child boots a sandbox
// under runc and waits past the timeout. The child must fail as a run that
// timed out does, with the goroutines' stacks, and leave no container of
// its instance. The sandbox's image is an empty one made for the test: the
// agent, bound in, is all a boot needs.
func TestTimeoutRemovesSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		sandboxtest.Need(t, "docker client: %v", err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx); err != nil {
		sandboxtest.Need(t, "docker daemon not reachable (scripts/ci-docker.sh starts it): %v", err)
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	instance, ref := "timeout"+suffix, "threadbox-timeout-test:"+suffix
	importEmptyImage(t, cli, ref)
	// Before the image's removal: a container left keeps its image.
	t.Cleanup(func() { _ = docker.RemoveInstance(ctx, instance) })

	cmd := exec.Command(os.Args[0], "-test.run=^TestTimeoutChild$", "-test.timeout=20s", "-test.v")
	// The child's temporary folders are made in the test's own (the
	// timeout leaves them), and it uses the agent built here.
	cmd.Env = append(os.Environ(), timeoutChildEnv+"="+instance+","+ref,
		"THREADBOX_AGENT_BIN="+sandboxtest.AgentBin(t), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
		t.Fatalf("the child did not fail: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("sandbox booted")) {
		t.Fatalf("the child's sandbox did not boot before the end of its run:\n%s", out)
	}
	for _, want := range []string{"test timed out", "docker_test.TestTimeoutChild("} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the child's output does not have %q:\n%s", want, out)
		}
	}
	if n, err := docker.CountInstance(ctx, instance); err != nil || n != 0 {
		t.Errorf("containers of the child's instance left: %d (%v)\n%s", n, err, out)
	}
}

// TestTimeoutChild boots a sandbox of the instance and image in
// THREADBOX_TIMEOUT_CHILD and waits until its test binary's run ends.
func TestTimeoutChild(t *testing.T) {
	v := os.Getenv(timeoutChildEnv)
	if v == "" {
		t.Skip("run by TestTimeoutRemovesSandboxes")
	}
	instance, ref, _ := strings.Cut(v, ",")
	be := backendAt(t, docker.Config{
		Settings:  boxes.Settings{Instance: instance},
		Image:     ref,
		Runtime:   docker.DefaultRuntime,
		SocketDir: t.TempDir(),
	})
	if err := be.Ensure(context.Background(), sandbox.Spec{ID: "hung"}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("sandbox booted")
	time.Sleep(time.Hour)
}

// importEmptyImage makes the image ref with no files, removed when the
// test ends.
func importEmptyImage(t *testing.T, cli *client.Client, ref string) {
	t.Helper()
	ctx := context.Background()
	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		t.Fatal(err)
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &empty, SourceName: "-"}, ref, image.ImportOptions{})
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	t.Cleanup(func() { _, _ = cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true}) })
}
