package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"threadbox/infra/sandbox/docker"
)

// TestWarmPoolServesNewThreads: with SANDBOX_WARM_POOL=1 the server keeps
// one warm sandbox; a new thread's first command runs in it (the thread's
// Docker container is the warm one, renamed, its files in the thread's
// folder), the pool boots another, and the capability matrix shows it.
func TestWarmPoolServesNewThreads(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) {
		env := childEnv(t, dbURL, map[string]string{
			"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner",
			"SANDBOX_WARM_POOL": "1", "SWEEP_INTERVAL": "300ms", "SANDBOX_IDLE": "1h",
		})
		instance := env["THREADBOX_INSTANCE"]
		prefix := "threadbox-" + instance + "-"
		// unclaimed lists the warm sandboxes no container claimed: their
		// names are still their slots'.
		unclaimed := func() []string {
			out, err := exec.Command("docker", "ps", "--filter", "label="+docker.LabelInstance+"="+instance,
				"--filter", "label="+docker.LabelWarm+"=true", "--format", `{{.Names}} {{.Label "`+docker.LabelContainer+`"}}`).Output()
			if err != nil {
				t.Fatalf("docker ps: %v", err)
			}
			var names []string
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if name, slot, ok := strings.Cut(line, " "); ok && name == prefix+slot {
					names = append(names, slot)
				}
			}
			return names
		}
		srv := startChild(t, env)
		f := newWSFixture(t, srv.server)
		// warmPool is the capability matrix's warm_pool of the one backend.
		warmPool := func() map[string]any {
			r := srv.do("GET", "/api/gpt/v1/sandbox/backends", f.admin, nil)
			rows, _ := r.json(t)["data"].([]any)
			if r.status != 200 || len(rows) != 1 {
				t.Fatalf("matrix: %d %s", r.status, r.body)
			}
			wp, _ := rows[0].(map[string]any)["warm_pool"].(map[string]any)
			return wp
		}
		// The owner counts a warm sandbox ready once its boot and warm-up
		// are over; Docker lists its container from its creation.
		var warm []string
		waitFor(t, 60*time.Second, func() bool { warm = unclaimed(); return len(warm) == 1 && warmPool()["ready"] == 1.0 },
			func() string { return fmt.Sprintf("no warm sandbox booted and ready: %v %v", unclaimed(), warmPool()) })
		if r := srv.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn("echo hi > /mnt/user-data/outputs/hi.txt")); r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
		out, err := exec.Command("docker", "inspect", "--format", `{{index .Config.Labels "`+docker.LabelWarm+`"}} {{index .Config.Labels "`+docker.LabelContainer+`"}}`, prefix+f.tid).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != "true "+warm[0] {
			t.Fatalf("the thread's sandbox: %q %v, want the warm sandbox %s claimed", got, err, warm[0])
		}
		if r := srv.do("GET", appAPI+"/thread/"+f.tid+"/download-file?path=/mnt/user-data/outputs/hi.txt", f.admin, nil); r.status != 200 || strings.TrimSpace(string(r.body)) != "hi" {
			t.Fatalf("the command's output file: %d %q", r.status, r.body)
		}
		waitFor(t, 60*time.Second, func() bool { w := unclaimed(); return len(w) == 1 && w[0] != warm[0] && warmPool()["ready"] == 1.0 },
			func() string { return "the pool did not refill" })
		if wp := warmPool(); wp["size"] != 1.0 || wp["ready"] != 1.0 {
			t.Fatalf("matrix warm_pool: %v", wp)
		}
	})
}

// TestWarmPoolSetting: SANDBOX_WARM_POOL is a count where 0 turns the pool
// off (a server refused 0 as "not a positive whole number"); negative or
// not a number is a configuration error.
func TestWarmPoolSetting(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  int
		ok    bool
	}{{"", 2, true}, {"0", 0, true}, {"5", 5, true}, {"-1", 0, false}, {"many", 0, false}} {
		cfg, err := loadConfig(func(k string) string {
			if k == "SANDBOX_WARM_POOL" {
				return tt.value
			}
			return ""
		})
		if (err == nil) != tt.ok || (tt.ok && cfg.WarmPool != tt.want) {
			t.Errorf("SANDBOX_WARM_POOL=%q: %d %v, want %d (ok %v)", tt.value, cfg.WarmPool, err, tt.want, tt.ok)
		}
	}
}
