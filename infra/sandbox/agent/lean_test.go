package agent_test

import (
	"bytes"
	"os"
	"strconv"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// TestAgentStartsLean: the agent binary executes itself again with one P
// (GOMAXPROCS=1 from the runtime's start, which is what makes an idle
// agent smaller), remembering the GOMAXPROCS it was started with; its
// commands get that one back.
func TestAgentStartsLean(t *testing.T) {
	a := startAgent(t, []string{"GOMAXPROCS=3"})
	ctx := testCtx(t, 10*time.Second)
	if err := a.client.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	vars := bytes.Split(env, []byte{0})
	for _, want := range []string{"GOMAXPROCS=1", "THREADBOX_AGENT_LEAN=3"} {
		found := false
		for _, v := range vars {
			found = found || string(v) == want
		}
		if !found {
			t.Errorf("the running agent's environment has no %s: %q", want, env)
		}
	}
	res, err := a.client.Exec(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo $GOMAXPROCS"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "3\n" {
		t.Errorf("a command's GOMAXPROCS = %q, want 3", got)
	}
}
