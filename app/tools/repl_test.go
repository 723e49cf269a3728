package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// replAnswer answers a driver request the way python_driver.py answers a
// repl_execute call.
func replAnswer(s *fakeSession, req []byte, stdout string, value *string) {
	var r struct{ ID string }
	_ = json.Unmarshal(req, &r)
	s.emit(answerLines(pythonAnswer{ID: r.ID, Stdout: stdout, Value: value}, 3800))
}

func TestReplHostSide(t *testing.T) {
	b := &fakeBackend{}
	var envs []map[string]string
	b.onWrite = func(s *fakeSession, p []byte) {
		var req struct {
			Code string
			Env  map[string]string
		}
		if err := json.Unmarshal(p, &req); err != nil {
			t.Errorf("request %q: %v", p, err)
			return
		}
		envs = append(envs, req.Env)
		switch req.Code {
		case "crash":
			s.emit("partial output\n")
			s.end(-1, nil)
		case "hang":
		case "chatty":
			// A subprocess wrote straight to the REPL's stdout first.
			s.emit("from a child\n")
			replAnswer(s, p, "from print\n", nil)
		default:
			v := "'" + req.Code + "'"
			replAnswer(s, p, "", &v)
		}
	}
	e := New(&sessionSandbox{backend: b}, nil, Config{})
	out := runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": "a"})
	if out["type"] != "repl_execute_result" || out["value"] != "'a'" || out["restarted"] != true {
		t.Fatalf("first call %v", out)
	}
	if args := b.started[0].cmd.Args; len(args) != 4 || args[0] != "python3" || args[3] != pythonDriver {
		t.Fatalf("driver command %q", args[:3])
	}
	if out = runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": "chatty"}); out["stdout"] != "from a child\nfrom print\n" || out["restarted"] != false {
		t.Fatalf("second call %v", out)
	}
	if len(b.started) != 1 || envs[1]["ANTHROPIC_MODEL"] != "m" {
		t.Fatalf("%d REPLs started; env %v", len(b.started), envs)
	}
	code, expl := errorCode(runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": "crash"}))
	if code != wire.CodeUnavailable || !strings.Contains(expl, "state is lost") || !strings.Contains(expl, "partial output") {
		t.Fatalf("crash: %s %q", code, expl)
	}
	if out = runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": "b"}); out["restarted"] != true || len(b.started) != 2 {
		t.Fatalf("after the crash %v (%d REPLs)", out, len(b.started))
	}
	code, _ = errorCode(runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": "hang", "timeout_seconds": 1}))
	if code != wire.CodeExecutionTimeExceeded {
		t.Fatalf("hang: %s", code)
	}
	eventually(t, func() bool {
		select {
		case <-b.started[1].done:
			return true
		default:
			return false
		}
	})
	if out = runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": "c", "restart": true}); out["restarted"] != true || len(b.started) != 3 {
		t.Fatalf("restart %v", out)
	}
}
