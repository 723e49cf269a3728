package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDeleteThreadWhileItsTurnRuns: a thread deleted while its detached
// turn runs a command (its client gone) ends that turn first. The delete
// answers at once; the turn does not go on without its thread — the model
// is not asked again, no sandbox is booted again for the deleted thread —
// and the server logs no error of its own for it (before the fix the turn
// ran on: its command failed as "sandbox unavailable", logged at ERROR,
// and the model was asked for the next step of a deleted thread).
func TestDeleteThreadWhileItsTurnRuns(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "LOG_LEVEL": "warn"})
	f := newWSFixture(t, s)
	fake.Push(bashStep("sleep 30; echo late > /mnt/user-data/outputs/late.txt"),
		bashStep("echo again > /mnt/user-data/outputs/again.txt"), textStep("done"))
	body, _ := json.Marshal(map[string]any{"content": "wait, then write", "stream": true, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	resp, evs, leave := openSSE(t, "POST", s.base+appAPI+"/thread/"+f.tid+"/messages", f.admin, body)
	turnID := resp.Header.Get("Threadbox-Turn-Id")
	if resp.StatusCode != 200 || turnID == "" {
		t.Fatalf("start: %d, turn id %q", resp.StatusCode, turnID)
	}
	for {
		ev, ok := nextEvent(t, evs, 60*time.Second)
		if !ok {
			t.Fatal("the stream ended before the command")
		}
		if strings.Contains(ev.data, `"server_tool_use"`) {
			break
		}
	}
	leave()
	time.Sleep(500 * time.Millisecond) // the command runs

	start := time.Now()
	if r := s.do("DELETE", appAPI+"/thread/"+f.tid, f.admin, nil); r.status/100 != 2 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the delete took %v", d)
	}
	if r := s.do("GET", appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events", f.admin, nil); r.status != 404 {
		t.Fatalf("events of the deleted thread's turn: %d %s", r.status, r.body)
	}
	// Long enough for a turn that went on to ask the model again and boot
	// a sandbox for its next command.
	time.Sleep(4 * time.Second)
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("the model was asked %d times; the turn went on after its thread was deleted", n)
	}
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=threadbox.instance="+s.env["THREADBOX_INSTANCE"]).Output()
	if err != nil {
		t.Fatal(err)
	}
	if ids := strings.Fields(string(out)); len(ids) != 0 {
		all, _ := exec.Command("docker", "ps", "-a", "--format", "{{.Names}} {{.Status}} {{.CreatedAt}}", "--filter", "label=threadbox.instance="+s.env["THREADBOX_INSTANCE"]).CombinedOutput()
		t.Errorf("%d sandbox(es) of the instance after the thread was deleted: %s (now %s)\n%s", len(ids), all, time.Now().UTC(), s.stderr.String())
	}
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("the server logged an error for a turn of a deleted thread: %s", line)
		}
	}
}
