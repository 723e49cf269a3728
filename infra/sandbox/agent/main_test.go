package agent_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestMain runs the tests under sandboxtest.Main: the agents they start
// are ended by their cleanups even when the run reaches its timeout, and
// the agent binary sandboxtest.AgentBin built is removed at the end.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// sandboxDirs are the folders one test agent uses in place of the sandbox's.
type sandboxDirs struct {
	workspace, outputs, tmp string
}

// testAgent is one agent process and the client talking to it.
type testAgent struct {
	client *agent.Client
	cmd    *exec.Cmd
	dirs   sandboxDirs
	stderr *syncBuffer
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startAgent runs the agent over pipes with temporary folders. extraEnv
// adds THREADBOX_AGENT_* settings.
func startAgent(t testing.TB, extraEnv []string, opts ...agent.Option) *testAgent {
	t.Helper()
	return startAgentWrapped(t, nil, extraEnv, opts...)
}

// startAgentWrapped runs the agent as the last argument of wrapper (such as
// unshare), or directly when wrapper is empty.
func startAgentWrapped(t testing.TB, wrapper []string, extraEnv []string, opts ...agent.Option) *testAgent {
	t.Helper()
	root := t.TempDir()
	// World-accessible, so that an agent running as another user (see
	// TestAgentAsNonRoot) can use the folders.
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	d := sandboxDirs{
		workspace: filepath.Join(root, "workspace"),
		outputs:   filepath.Join(root, "outputs"),
		tmp:       filepath.Join(root, "tmp"),
	}
	argv := append(slices.Clone(wrapper), sandboxtest.AgentBin(t))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"THREADBOX_AGENT_WORKSPACE="+d.workspace,
		"THREADBOX_AGENT_OUTPUTS="+d.outputs,
		"THREADBOX_AGENT_TMP="+d.tmp,
		"THREADBOX_AGENT_OOM_EVENTS="+filepath.Join(root, "no-memory.events"),
		"THREADBOX_AGENT_LOG_LEVEL=debug",
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rw := agent.NewConn(stdout, stdin, func() error {
		_ = stdout.(io.Closer).Close()
		return stdin.Close()
	})
	c := agent.NewClient(rw, opts...)
	ta := &testAgent{client: c, cmd: cmd, dirs: d, stderr: stderr}
	sandboxtest.Cleanup(t, func() {
		_ = c.Close()
		reapAgent(t, cmd, stderr)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping a fresh agent: %v\nstderr: %s", err, stderr.String())
	}
	return ta
}

// reapAgent waits up to 5 s for an agent told to end, kills it after that,
// and logs its stderr when the test failed.
func reapAgent(t testing.TB, cmd *exec.Cmd, stderr *syncBuffer) {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	if t.Failed() {
		t.Logf("agent stderr:\n%s", stderr.String())
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// requireService fails the test under CI=true and skips it otherwise: the
// house rule for tests that need something the machine may lack.
func requireService(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s unavailable: %v", what, err)
	}
	t.Skipf("%s unavailable: %v", what, err)
}
