package main

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/infra/llm/fakeupstream"
)

// sessionCalls makes one container's requests to threadbox servers behind
// one fake model: a code_execution cell, or one sandbox tool call.
type sessionCalls struct {
	t    *testing.T
	fake *fakeupstream.Server
	tok  string
	box  string
}

// cell runs code as a code_execution_20260120 cell on s.
func (c sessionCalls) cell(s *server, code string) anthropic.CodeExecutionResultBlock {
	c.t.Helper()
	c.fake.Push(steps(pyStep(code)), textStep("ok"))
	cl := msgClient(s, c.tok)
	msg, err := cl.Messages.New(context.Background(), msgParams(c.box, userText("run"), codeExec2601...))
	if err != nil {
		c.t.Fatal(err)
	}
	return pyResult(c.t, msg.Content, 0)
}

// tool calls the sandbox tool name with input on s.
func (c sessionCalls) tool(s *server, name string, input map[string]any) sandboxBlock {
	c.t.Helper()
	c.fake.Push(steps(call(name, input)), textStep("ok"))
	calls, _ := sandboxTurn(c.t, msgClient(s, c.tok), c.box)
	return calls[0]
}

// TestSessionsSurviveRestart: a sandbox's sessions outlive the threadbox
// process that started them, under docker (runc: the sandbox runs on and
// is adopted) and gvisor (SIGTERM: checkpointed and restored; kill -9: its
// relay holds it and the next process adopts it). After SIGTERM, and after
// kill -9 once the dead process's lease lapsed, the next process attaches
// to the sessions the first one started: the code_execution interpreter
// still holds x, an exec_command session answers write_stdin under its id
// with its cursor going on, a background HTTP server still answers and
// /tmp is there, with no note of a fresh start. Under gvisor the next idle
// stop checkpoints the sandbox and the next cell restores it, all of that
// still there. The session then exits as any does.
func TestSessionsSurviveRestart(t *testing.T) {
	for _, backend := range []string{"docker", "gvisor"} {
		for _, stop := range []string{"SIGTERM", "kill -9"} {
			t.Run(backend+"/"+stop, func(t *testing.T) {
				var bin string
				settings := map[string]string{"SANDBOX_BACKEND": backend, "SWEEP_INTERVAL": "300ms", "LEASE_TTL": "2s", "SANDBOX_IDLE": "1h"}
				if backend == "gvisor" {
					bin = needGvisor(t)
					settings["THREADBOX_INSTANCE"] = gvisorInstance(t)
				} else {
					bin = needDocker(t)
					settings["SANDBOX_WARM_POOL"] = "0"
				}
				t.Parallel()
				sessionsSurvive(t, bin, settings, stop)
			})
		}
	}
}

// sessionsSurvive is one case of TestSessionsSurviveRestart.
func sessionsSurvive(t *testing.T, bin string, settings map[string]string, stop string) {
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	settings["THREADBOX_AGENT_BIN"] = bin
	settings["MODEL_PROVIDER"], settings["MODEL_BASE_URL"], settings["MODEL_NAME"] = "anthropic", fake.URL(), "fake-model"
	env := childEnv(t, "", settings)
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one := startChild(t, env)
	c := sessionCalls{t: t, fake: fake, tok: one.bootstrap("acme", "admin@acme.test"), box: "kept"}
	const serve = `import subprocess, time, urllib.request
subprocess.Popen(["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1", "--directory", "/tmp"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
open("/tmp/kept", "w").write("kept")
for _ in range(100):
    try:
        urllib.request.urlopen("http://127.0.0.1:8123/kept", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
x = 41`
	if r := c.cell(one.server, serve); r.ReturnCode != 0 {
		t.Fatalf("first cell %+v", r)
	}
	term := c.tool(one.server, "exec_command", map[string]any{"command": "python3 -i -q", "grace_seconds": 1})
	sid := term.str("session_id")
	if term.Content["alive"] != true || !strings.HasPrefix(sid, "sess_") {
		t.Fatalf("exec_command %v", term.Content)
	}
	w := c.tool(one.server, "write_stdin", map[string]any{"session_id": sid, "input": "y = 6 * 7\n", "since": term.num("cursor"), "wait_seconds": 5})
	cursor := w.num("cursor")
	if w.Content["alive"] != true || cursor < term.num("cursor") {
		t.Fatalf("write_stdin %v", w.Content)
	}

	if stop == "SIGTERM" {
		one.term(t)
	} else {
		one.kill()
	}
	gvisor := env["SANDBOX_BACKEND"] == "gvisor"
	env2 := maps.Clone(env)
	env2["LISTEN_ADDR"] = freeAddr(t)
	if gvisor {
		env2["SANDBOX_IDLE"] = "4s"
	}
	two := startChild(t, env2)
	const check = `import urllib.request
print(x + 1, urllib.request.urlopen("http://127.0.0.1:8123/kept", timeout=5).read().decode())`
	if r := c.cell(two.server, check); r.ReturnCode != 0 || r.Stdout != "42 kept\n" || r.Stderr != "" {
		t.Fatalf("cell after %s %+v: want the interpreter attached with x, the HTTP server up and /tmp there", stop, r)
	}
	r := c.tool(two.server, "write_stdin", map[string]any{"session_id": sid, "input": "print(y)\n", "since": cursor, "wait_seconds": 5})
	if r.Type != "write_stdin_result" || r.Content["alive"] != true || !strings.Contains(r.str("stdout"), "42") ||
		strings.Contains(r.str("stdout"), "6 * 7") || r.num("cursor") <= cursor || r.num("dropped_bytes") != 0 {
		t.Fatalf("write_stdin after %s %v: want the session attached, its cursor going on", stop, r.Content)
	}
	cursor = r.num("cursor")

	if gvisor {
		// The sandbox's idle stop checkpoints it; the next cell restores it.
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(two.stdout.String(), `"left_running":false`); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the sandbox was not checkpointed at its idle stop\n%s", two.stdout.String())
			}
		}
		if r := c.cell(two.server, check); r.ReturnCode != 0 || r.Stdout != "42 kept\n" || r.Stderr != "" {
			t.Fatalf("cell after the idle stop %+v: want the sandbox restored with x and the HTTP server", r)
		}
		r = c.tool(two.server, "write_stdin", map[string]any{"session_id": sid, "input": "print(y + 1)\n", "since": cursor, "wait_seconds": 5})
		if r.Content["alive"] != true || !strings.Contains(r.str("stdout"), "43") || r.num("cursor") <= cursor {
			t.Fatalf("write_stdin after the idle stop %v: want the session restored", r.Content)
		}
	}
	if r := c.tool(two.server, "write_stdin", map[string]any{"session_id": sid, "input": "exit()\n", "wait_seconds": 5}); r.Content["alive"] != false || r.num("exit_code") != 0 {
		t.Fatalf("exit %v", r.Content)
	}
	two.term(t)
}
