package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// longCommand writes started.txt, runs for three seconds, writes ran.txt
// and then sleeps for a minute: once ran.txt exists the command has run
// at least three seconds, and it ends only when something ends it.
const longCommand = "echo started > /mnt/user-data/outputs/started.txt; sleep 3; echo ran > /mnt/user-data/outputs/ran.txt; sleep 60"

// usageRow returns the org's usage of today for its one user, or nil when
// it has none.
func usageRow(t *testing.T, s *server, tok string) map[string]any {
	t.Helper()
	today := time.Now().UTC().Format("2006-01-02")
	r := s.do("GET", appAPI+"/org/usage?from="+today+"&to="+today+"&group_by=user", tok, nil)
	if r.status != 200 {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	data := r.json(t)["data"].([]any)
	switch len(data) {
	case 0:
		return nil
	case 1:
		return data[0].(map[string]any)
	}
	t.Fatalf("usage rows: %s", r.body)
	return nil
}

// waitRan waits until the long command of the thread has run three
// seconds (ran.txt exists).
func waitRan(t *testing.T, s *server, tok, tid string) {
	t.Helper()
	waitFor(t, 60*time.Second, func() bool {
		return s.do("GET", appAPI+"/thread/"+tid+"/download-file?path=/mnt/user-data/outputs/ran.txt", tok, nil).status == 200
	}, func() string { return "the command did not get past its first three seconds" })
}

// TestStoppedCommandIsMetered: a chat turn's command stopped by its owner
// after it ran three seconds counts in the org's usage as one command of
// at least three seconds of wall time.
func TestStoppedCommandIsMetered(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = post(s.base, appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn(longCommand))
	}()
	waitRan(t, s, f.admin, f.tid)
	var listing struct {
		RunningTurnID string `json:"running_turn_id"`
	}
	if err := json.Unmarshal(s.do("GET", appAPI+"/thread/"+f.tid+"/messages", f.admin, nil).body, &listing); err != nil || listing.RunningTurnID == "" {
		t.Fatalf("no running turn: %v", err)
	}
	mustStatus(t, "stop", s.do("POST", appAPI+"/thread/"+f.tid+"/turns/"+listing.RunningTurnID+"/stop", f.admin, nil), 200)
	<-done
	waitFor(t, 10*time.Second, func() bool { return lastStatus(s, f.admin, f.tid) == "assistant stopped" },
		func() string { return "the turn shows as " + lastStatus(s, f.admin, f.tid) })
	u := usageRow(t, s, f.admin)
	if u == nil || u["commands"] != 1.0 || u["wall_seconds"].(float64) < 3 || u["wall_seconds"].(float64) >= 60 {
		t.Fatalf("usage after a stopped command: %v, want one command of 3 to 60 s", u)
	}
}

// TestCrashedCommandIsMetered: a command in flight when its server is
// killed (kill -9) is metered by the next server's sweep once the dead
// server's lease time has passed: one command, its wall time up to when
// the dead server last saw it running (at least two of its three
// seconds).
func TestCrashedCommandIsMetered(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) {
		env := childEnv(t, dbURL, map[string]string{
			"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner",
			"LEASE_TTL": "2s", "SWEEP_INTERVAL": "300ms",
		})
		first := startChild(t, env)
		f := newWSFixture(t, first.server)
		go post(first.base, appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn(longCommand))
		waitRan(t, first.server, f.admin, f.tid)
		first.kill()

		second := startChild(t, env)
		var u map[string]any
		waitFor(t, 30*time.Second, func() bool {
			u = usageRow(t, second.server, f.admin)
			return u != nil && u["commands"] == 1.0
		}, func() string { return fmt.Sprintf("usage after the crash: %v\n%s", u, second.stdout.String()) })
		if w := u["wall_seconds"].(float64); w < 2 || w >= 60 {
			t.Fatalf("the crashed command's wall time %v s, want from 2 to 60", w)
		}
	})
}
