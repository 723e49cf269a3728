package main

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/infra/llm/fakeupstream"
)

// TestDockerSessionsSurviveRestart: a docker (runc) sandbox outlives the
// threadbox process that ran it, and so do its sessions. After SIGTERM,
// and after kill -9 once the dead process's lease lapsed, the next process
// adopts the sandbox and attaches to the sessions the first one started:
// the code_execution interpreter still holds x, and an exec_command
// session answers write_stdin under its id, its cursor going on.
func TestDockerSessionsSurviveRestart(t *testing.T) {
	bin := needDocker(t)
	for _, stop := range []string{"SIGTERM", "kill -9"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			fake := fakeupstream.New()
			t.Cleanup(fake.Close)
			env := childEnv(t, "", map[string]string{
				"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "SWEEP_INTERVAL": "300ms", "LEASE_TTL": "2s",
				"SANDBOX_WARM_POOL": "0", "MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model",
			})
			env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
			one := startChild(t, env)
			tok := one.bootstrap("acme", "admin@acme.test")
			ctx := context.Background()
			const box = "kept"
			cell := func(s *server, code string) anthropic.CodeExecutionResultBlock {
				t.Helper()
				fake.Push(steps(pyStep(code)), textStep("ok"))
				cl := msgClient(s, tok)
				msg, err := cl.Messages.New(ctx, msgParams(box, userText("run"), codeExec2601...))
				if err != nil {
					t.Fatal(err)
				}
				return pyResult(t, msg.Content, 0)
			}
			tool := func(s *server, name string, input map[string]any) sandboxBlock {
				t.Helper()
				fake.Push(steps(call(name, input)), textStep("ok"))
				calls, _ := sandboxTurn(t, msgClient(s, tok), box)
				return calls[0]
			}
			if r := cell(one.server, "x = 41"); r.ReturnCode != 0 {
				t.Fatalf("first cell %+v", r)
			}
			term := tool(one.server, "exec_command", map[string]any{"command": "python3 -i -q", "grace_seconds": 1})
			sid := term.str("session_id")
			if term.Content["alive"] != true || !strings.HasPrefix(sid, "sess_") {
				t.Fatalf("exec_command %v", term.Content)
			}
			w := tool(one.server, "write_stdin", map[string]any{"session_id": sid, "input": "y = 6 * 7\n", "since": term.num("cursor"), "wait_seconds": 5})
			cursor := w.num("cursor")
			if w.Content["alive"] != true || cursor < term.num("cursor") {
				t.Fatalf("write_stdin %v", w.Content)
			}
			if stop == "SIGTERM" {
				one.term(t)
			} else {
				one.kill()
			}
			env2 := maps.Clone(env)
			env2["LISTEN_ADDR"] = freeAddr(t)
			two := startChild(t, env2)
			if r := cell(two.server, "print(x + 1)"); r.ReturnCode != 0 || r.Stdout != "42\n" || r.Stderr != "" {
				t.Fatalf("cell after the restart %+v: want the interpreter attached with x", r)
			}
			r := tool(two.server, "write_stdin", map[string]any{"session_id": sid, "input": "print(y)\n", "since": cursor, "wait_seconds": 5})
			if r.Type != "write_stdin_result" || r.Content["alive"] != true || !strings.Contains(r.str("stdout"), "42") ||
				strings.Contains(r.str("stdout"), "6 * 7") || r.num("cursor") <= cursor || r.num("dropped_bytes") != 0 {
				t.Fatalf("write_stdin after the restart %v: want the session attached, its cursor going on", r.Content)
			}
			two.term(t)
		})
	}
}
