package agent_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

// TestAgentAsNonRoot runs the agent as nobody, as in a sandbox, and checks
// that exec, $OUTPUT_DIR, timeouts and terminals need no privilege.
func TestAgentAsNonRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the tests already run the agent as a non-root user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		requireService(t, "setpriv", err)
	}
	a := startAgentWrapped(t, []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, nil)
	ctx := testCtx(t, 30*time.Second)

	res, err := a.client.Exec(ctx, sandbox.Command{Args: sh(`id -u; echo data > "$OUTPUT_DIR/out.txt"`), OutputDir: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "65534\n" || res.ExitCode != 0 || len(res.OutputFiles) != 1 {
		t.Fatalf("exit %d stdout %q stderr %q files %q", res.ExitCode, res.Stdout, res.Stderr, res.OutputFiles)
	}
	if b, err := os.ReadFile(res.OutputFiles[0]); err != nil || string(b) != "data\n" {
		t.Fatalf("output file: %q %v", b, err)
	}

	res, err = a.client.Exec(ctx, sandbox.Command{Args: sh(`sleep 100 & sleep 100`), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 124 || string(res.Stderr) != "Command timed out after 1s." {
		t.Fatalf("timeout: exit %d stderr %q", res.ExitCode, res.Stderr)
	}

	p, err := a.client.Start(ctx, sandbox.Command{Args: []string{"tty"}}, agent.StartOptions{TTY: &agent.TTY{Rows: 10, Cols: 40}})
	if err != nil {
		t.Fatal(err)
	}
	res, err = p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(res.Stdout), "/dev/pts/") {
		t.Fatalf("tty: %q", res.Stdout)
	}
}
