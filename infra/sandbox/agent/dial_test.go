package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestDialModeServesAndRedials runs the agent with THREADBOX_AGENT_DIAL: it
// connects to the host's socket and serves the protocol there; when the
// connection ends it kills what was running and dials again, so a new host
// can take over.
func TestDialModeServesAndRedials(t *testing.T) {
	dir, err := os.MkdirTemp("", "tbdial")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	startDialAgent(t, sock)

	accept := func() *agent.Client {
		t.Helper()
		_ = ln.SetDeadline(time.Now().Add(10 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			t.Fatalf("the agent did not dial: %v", err)
		}
		return agent.NewClient(c)
	}
	ctx := testCtx(t, 30*time.Second)

	first := accept()
	res, err := first.Exec(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo over the socket"}})
	if err != nil || string(res.Stdout) != "over the socket\n" {
		t.Fatalf("exec over the socket = %q, %v", res.Stdout, err)
	}
	p, err := first.Start(ctx, sandbox.Command{Args: []string{"sleep", "60"}}, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("sleep is not running: %v", err)
	}

	// The host goes away: the agent dials again, and the command of the
	// old connection does not outlive it.
	first.Close()
	second := accept()
	defer second.Close()
	if err := second.Ping(ctx); err != nil {
		t.Fatalf("ping after redial: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("sleep %d outlived the connection that started it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The new connection runs commands as the first did.
	res, err = second.Exec(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo again"}})
	if err != nil || string(res.Stdout) != "again\n" {
		t.Fatalf("exec after redial = %q, %v", res.Stdout, err)
	}
}

// startDialAgent runs the agent in dial mode towards the socket sock, and
// ends it when the test ends (or when the run reaches its timeout).
func startDialAgent(t *testing.T, sock string) *exec.Cmd {
	t.Helper()
	work := t.TempDir()
	cmd := exec.Command(sandboxtest.AgentBin(t))
	cmd.Env = append(os.Environ(),
		"THREADBOX_AGENT_DIAL="+sock,
		"THREADBOX_AGENT_WORKSPACE="+work,
		"THREADBOX_AGENT_OUTPUTS="+filepath.Join(work, "out"),
		"THREADBOX_AGENT_TMP="+filepath.Join(work, "tmp"),
	)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		reapAgent(t, cmd, stderr)
	})
	return cmd
}

// TestTimeoutEndsAgents runs a test binary of this package whose test
// starts an agent and hangs until the run's timeout: the agent ends with
// the run. An agent in dial mode outlives its host otherwise: it dials the
// host's socket again and again.
func TestTimeoutEndsAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTimeoutChild$", "-test.timeout=6s", "-test.v")
	cmd.Env = append(os.Environ(), timeoutChildEnv+"=1",
		"THREADBOX_AGENT_BIN="+sandboxtest.AgentBin(t), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
		t.Fatalf("the child did not fail: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("test timed out")) {
		t.Errorf("the child's run did not end at its timeout:\n%s", out)
	}
	_, after, ok := bytes.Cut(out, []byte("agent pid "))
	pid, err := strconv.Atoi(string(bytes.Fields(after)[0]))
	if !ok || err != nil {
		t.Fatalf("the child did not start its agent:\n%s", out)
	}
	// The agent is no child of this process: once ended it is reaped by
	// another, so it leaves no entry behind.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the child's agent (pid %d) outlived its run:\n%s", pid, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const timeoutChildEnv = "THREADBOX_AGENT_TIMEOUT_CHILD"

// TestTimeoutChild starts an agent in dial mode and waits until its test
// binary's run ends.
func TestTimeoutChild(t *testing.T) {
	if os.Getenv(timeoutChildEnv) == "" {
		t.Skip("run by TestTimeoutEndsAgents")
	}
	dir, err := os.MkdirTemp("", "tbdial")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := startDialAgent(t, sock)
	fmt.Printf("agent pid %d\n", cmd.Process.Pid)
	time.Sleep(time.Hour)
}
