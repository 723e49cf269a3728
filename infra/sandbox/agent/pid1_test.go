package agent_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// TestAgentAsPID1 runs the agent as PID 1 of a new PID namespace, as in a
// container: orphans are reparented to it by the kernel, and it must reap
// them while every command still gets its own exit status.
func TestAgentAsPID1(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		err = exec.Command(unshare, "--pid", "--fork", "true").Run()
	}
	if err != nil {
		requireService(t, "unshare --pid (needs root or user namespaces)", err)
	}
	a := startAgentWrapped(t, []string{unshare, "--pid", "--fork", "--kill-child", "--"}, nil)

	res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(`echo $PPID`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "1" {
		t.Fatalf("the command's parent is %q, want the agent as PID 1", got)
	}

	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{
				Args: sh(`setsid sh -c 'sleep 0.2' </dev/null >/dev/null 2>&1 & sleep 0.1 & exit $1`, strconv.Itoa(20+i)),
			})
			if err != nil {
				t.Error(err)
				return
			}
			if res.ExitCode != 20+i {
				t.Errorf("command %d: exit %d, want %d", i, res.ExitCode, 20+i)
			}
		})
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond)

	// The agent is unshare's only child; find its pid on the host.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/task/" + strconv.Itoa(a.cmd.Process.Pid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	kids := strings.Fields(string(b))
	if len(kids) != 1 {
		t.Fatalf("unshare has children %q", kids)
	}
	agentPid, _ := strconv.Atoi(kids[0])
	if zs := zombieChildren(t, agentPid); len(zs) > 0 {
		t.Fatalf("agent (PID 1) left zombies %v", zs)
	}
}
