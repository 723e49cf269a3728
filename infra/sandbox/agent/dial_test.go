package agent_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
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

	work := t.TempDir()
	cmd := exec.Command(agentBin)
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
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		reapAgent(t, cmd, stderr)
	})

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
