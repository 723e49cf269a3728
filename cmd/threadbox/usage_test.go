package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// burnScript makes the runner model run a python block that spins until it
// has used 2.2 s of CPU time (process_time), so that a busy machine, which
// gives it less CPU per wall second, still meters at least 2 s.
const burnScript = "```python\nimport time\nwhile time.process_time() < 2.2:\n    pass\nprint('burnt')\n```"

// TestOrgUsage: a chat turn of the runner model runs a command in a Docker
// sandbox that burns 2.2 s of CPU; the org's usage report then shows, for
// that user, today, the thread and its container, the command, its CPU
// time (from the agent's rusage) and wall time, and the model's output
// tokens. Members get 403 and bad parameters 400.
func TestOrgUsage(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) {
		// Sweeps every second meter the sandbox's time and CPU.
		s := startServer(t, dbURL, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner", "SWEEP_INTERVAL": "1s"})
		f := newWSFixture(t, s)
		today := time.Now().UTC().Format("2006-01-02")
		span := "from=" + today + "&to=" + today

		if r := s.do("GET", appAPI+"/org/usage?"+span, f.admin, nil); r.status != 200 || len(r.json(t)["data"].([]any)) != 0 {
			t.Fatalf("usage before any turn: %d %s", r.status, r.body)
		}
		r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
			"content": burnScript, "pgpt": map[string]any{"tools": []any{"code_execution"}},
		})
		if r.status != 200 || !strings.Contains(string(r.body), "burnt") {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}

		row := func(t *testing.T, groupBy string) map[string]any {
			t.Helper()
			r := s.do("GET", appAPI+"/org/usage?"+span+"&group_by="+groupBy, f.admin, nil)
			if r.status != 200 {
				t.Fatalf("usage by %s: %d %s", groupBy, r.status, r.body)
			}
			data := r.json(t)["data"].([]any)
			if len(data) != 1 {
				t.Fatalf("usage by %s: want one row, got %s", groupBy, r.body)
			}
			return data[0].(map[string]any)
		}
		for _, tt := range []struct {
			groupBy, key, want string
		}{
			{"day", "day", today},
			{"user", "email", "admin@acme.test"},
			{"thread", "thread_id", f.tid},
			{"container", "thread_id", f.tid},
		} {
			t.Run("by "+tt.groupBy, func(t *testing.T) {
				u := row(t, tt.groupBy)
				if u[tt.key] != tt.want {
					t.Fatalf("%s = %v, want %s: %v", tt.key, u[tt.key], tt.want, u)
				}
				if cpu := u["cpu_seconds"].(float64); cpu < 2 || cpu > 60 {
					t.Fatalf("cpu_seconds %v, want >= 2 (the command burnt 2.2 s): %v", cpu, u)
				}
				if u["commands"].(float64) != 1 || u["wall_seconds"].(float64) < u["cpu_seconds"].(float64)/2 || u["output_tokens"].(float64) <= 0 {
					t.Fatalf("usage row: %v", u)
				}
			})
		}
		// The sandbox's time and its control group's CPU time are metered
		// at the sweeps: the sandbox has run since the turn, and its group
		// used at least the 2.2 s the command burnt (less under gVisor's
		// accounting skew: at least 1 s).
		t.Run("sandbox time", func(t *testing.T) {
			deadline := time.Now().Add(30 * time.Second)
			for {
				u := row(t, "thread")
				if u["sandbox_seconds"].(float64) > 0 && u["sandbox_cpu_seconds"].(float64) >= 1 {
					if cpu := u["sandbox_cpu_seconds"].(float64); cpu > u["sandbox_seconds"].(float64)*2+1 || cpu > 120 {
						t.Fatalf("sandbox CPU %v s beyond what its sandbox time allows: %v", cpu, u)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sandbox time not metered within 30 s: %v", u)
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
		// Another org's report has none of it.
		if r := s.do("GET", appAPI+"/org/usage?"+span, f.out, nil); r.status != 200 || len(r.json(t)["data"].([]any)) != 0 {
			t.Fatalf("another org's usage: %d %s", r.status, r.body)
		}
		for _, tt := range []struct {
			name, token, query string
			status             int
		}{
			{"member", f.member, span, 403},
			{"bad group_by", f.admin, span + "&group_by=project", 400},
			{"bad date", f.admin, "from=yesterday&to=" + today, 400},
			{"to before from", f.admin, "from=" + today + "&to=2020-01-01", 400},
			{"default span", f.admin, "", 200},
			{"default span before the first day", f.admin, "to=0000-01-05", 200},
			{"bad to", f.admin, "to=05-01-2026", 400},
		} {
			if r := s.do("GET", appAPI+"/org/usage?"+tt.query, tt.token, nil); r.status != tt.status {
				t.Errorf("%s: %d %s, want %d", tt.name, r.status, r.body, tt.status)
			}
		}
	})
}

// burnCell is Python that spins until it has used 1.1 s more CPU time
// than when it started, whatever the interpreter used before.
const burnCell = "import time\nt0 = time.process_time()\nwhile time.process_time() - t0 < 1.1:\n    pass\nprint(\"burnt\")"

// TestSessionUsage: what runs in sessions is metered like commands. Through
// the Messages API, with a scripted model and Docker sandboxes, an
// exec_command session, a repl_execute call and a Python cell of
// code_execution_20260120 each burn 1.1 s of CPU; after each, the org's
// usage for the user and day has one command more and at least 1 s more
// CPU time and wall time.
func TestSessionUsage(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	today := time.Now().UTC().Format("2006-01-02")
	usage := func(t *testing.T) (commands, cpu, wall float64) {
		t.Helper()
		r := s.do("GET", appAPI+"/org/usage?from="+today+"&to="+today+"&group_by=user", tok, nil)
		if r.status != 200 {
			t.Fatalf("usage: %d %s", r.status, r.body)
		}
		data := r.json(t)["data"].([]any)
		if len(data) == 0 {
			return 0, 0, 0
		}
		u := data[0].(map[string]any)
		if len(data) != 1 || u["email"] != "admin@acme.test" {
			t.Fatalf("usage rows: %s", r.body)
		}
		return u["commands"].(float64), u["cpu_seconds"].(float64), u["wall_seconds"].(float64)
	}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T) string // the call's output
	}{
		{"exec_command session", func(t *testing.T) string {
			fake.Push(steps(call("exec_command", map[string]any{"command": "python3 -c '" + burnCell + "'", "grace_seconds": 30})), textStep("ok"))
			calls, _ := sandboxTurn(t, cl, "usage1")
			if len(calls) != 1 || calls[0].Content["alive"] != false {
				t.Fatalf("the session did not end within its grace: %v", calls)
			}
			return calls[0].str("stdout")
		}},
		{"repl_execute", func(t *testing.T) string {
			fake.Push(steps(call("repl_execute", map[string]any{"code": burnCell})), textStep("ok"))
			calls, _ := sandboxTurn(t, cl, "usage1")
			if len(calls) != 1 {
				t.Fatalf("%d calls", len(calls))
			}
			return calls[0].str("stdout")
		}},
		{"code_execution Python cell", func(t *testing.T) string {
			fake.Push(steps(pyStep(burnCell)), textStep("ok"))
			msg, err := cl.Messages.New(context.Background(), msgParams("usage1", userText("burn"), codeExec2601...))
			if err != nil {
				t.Fatal(err)
			}
			return pyResult(t, msg.Content, 0).Stdout
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n0, cpu0, wall0 := usage(t)
			if out := tt.run(t); !strings.Contains(out, "burnt") {
				t.Fatalf("output %q", out)
			}
			n1, cpu1, wall1 := usage(t)
			if n1 != n0+1 || cpu1-cpu0 < 1 || cpu1-cpu0 > 60 || wall1-wall0 < 1 {
				t.Fatalf("usage went from %v commands, %v s CPU, %v s wall to %v, %v, %v: want one command and at least 1 s of CPU and wall more", n0, cpu0, wall0, n1, cpu1, wall1)
			}
		})
	}
}
