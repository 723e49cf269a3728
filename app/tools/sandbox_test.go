package tools

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

func newTerminalExecutor(cfg Config) (*Executor, *fakeBackend) {
	b := &fakeBackend{}
	return New(&sessionSandbox{backend: b}, nil, cfg), b
}

func TestExecCommand(t *testing.T) {
	e, b := newTerminalExecutor(Config{})
	b.onStart = func(s *fakeSession) {
		switch s.cmd.Args[2] {
		case "quick":
			s.emit("hi\r\n")
			s.end(3, nil)
		case "long":
			s.emit(">>> ")
		}
	}
	out := runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "quick", "rows": 30, "cols": 120})
	if out["type"] != "exec_command_result" || out["stdout"] != "hi\r\n" || out["exit_code"] != 3.0 || out["alive"] != false || out["status"] != "exited" || out["session_id"] != nil {
		t.Fatalf("quick: %v", out)
	}
	if tty := b.started[0].tty; tty == nil || tty.Rows != 30 || tty.Cols != 120 {
		t.Fatalf("tty %+v", tty)
	}
	if env := b.started[0].cmd.Env; len(env) != 1 || env[0] != "ANTHROPIC_MODEL=m" {
		t.Fatalf("env %v", env)
	}
	out = runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "long", "grace_seconds": 0.05})
	sid, _ := out["session_id"].(string)
	if !strings.HasPrefix(sid, "sess_") || out["alive"] != true || out["status"] != "running" || out["exit_code"] != nil || out["pid"] != 102.0 || out["cursor"] != 4.0 || out["stdout"] != ">>> " {
		t.Fatalf("long: %v", out)
	}
	if tty := b.started[1].tty; tty.Rows != 24 || tty.Cols != 80 {
		t.Fatalf("default tty %+v", tty)
	}
	for _, in := range []map[string]any{
		{},
		{"command": "x", "rows": 0},
		{"command": "x", "cols": 1001},
		{"command": "x", "grace_seconds": -1},
		{"command": 5},
	} {
		if code, _ := errorCode(runSandbox(t, e, messages.ToolExecCommand, in)); code != wire.CodeInvalidToolInput {
			t.Errorf("input %v accepted", in)
		}
	}
}

func TestWriteStdinCursors(t *testing.T) {
	e, b := newTerminalExecutor(Config{})
	b.onStart = func(s *fakeSession) { s.emit("$ ") }
	b.onWrite = func(s *fakeSession, p []byte) {
		if string(p) == "exit\n" {
			s.emit("bye\r\n")
			s.end(0, nil)
			return
		}
		s.emit("got " + string(p))
	}
	out := runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "sh", "grace_seconds": 0})
	sid := out["session_id"].(string)
	c1 := out["cursor"].(float64)
	out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "a\n", "since": c1, "wait_seconds": 2})
	if out["stdout"] != "got a\n" || out["cursor"] != c1+6 || out["alive"] != true {
		t.Fatalf("first write: %v", out)
	}
	c2 := out["cursor"].(float64)
	out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "b\n", "since": c2, "wait_seconds": 2})
	if out["stdout"] != "got b\n" {
		t.Fatalf("second write shows only the new output: %v", out)
	}
	// Without since, a read continues from the latest cursor: nothing new.
	if out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "", "wait_seconds": 0}); out["stdout"] != "" {
		t.Fatalf("read without since: %v", out)
	}
	// An older cursor reads again from there.
	if out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "", "since": 0, "wait_seconds": 0}); out["stdout"] != "$ got a\ngot b\n" {
		t.Fatalf("re-read: %v", out)
	}
	out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "exit\n", "wait_seconds": 2})
	if out["alive"] != false || out["exit_code"] != 0.0 || out["status"] != "exited" || out["stdout"] != "bye\r\n" {
		t.Fatalf("exit: %v", out)
	}
	// The ended session is forgotten once its last output was read.
	if code, expl := errorCode(runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "x"})); code != wire.CodeInvalidToolInput || !strings.Contains(expl, sid) {
		t.Fatalf("write after the end: %s %q", code, expl)
	}
	for _, in := range []map[string]any{{"input": "x"}, {"session_id": sid}, {"session_id": "sess_nope", "input": ""}, {"session_id": sid, "input": "", "since": -1}} {
		if code, _ := errorCode(runSandbox(t, e, messages.ToolWriteStdin, in)); code != wire.CodeInvalidToolInput {
			t.Errorf("input %v accepted", in)
		}
	}
}

func TestSessionBufferBound(t *testing.T) {
	e, b := newTerminalExecutor(Config{SessionBuffer: 1000})
	out := runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "yes", "grace_seconds": 0})
	sid := out["session_id"].(string)
	s := b.started[0]
	chunk := strings.Repeat("0123456789", 70) // 700 bytes
	for range 50 {
		s.emit(chunk)
	}
	out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "", "since": 0, "wait_seconds": 0})
	got := out["stdout"].(string)
	if len(got) != 1000 || out["cursor"] != 35000.0 || out["dropped_bytes"] != 34000.0 || !strings.HasSuffix(chunk, got[len(got)-700:]) {
		t.Fatalf("kept %d bytes, cursor %v, dropped %v", len(got), out["cursor"], out["dropped_bytes"])
	}
	// One chunk larger than the whole buffer keeps its tail.
	s.emit(strings.Repeat("x", 5000) + "END")
	out = runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": sid, "input": "", "since": 35000, "wait_seconds": 0})
	if got := out["stdout"].(string); len(got) != 1000 || !strings.HasSuffix(got, "END") || out["dropped_bytes"] != 4003.0 {
		t.Fatalf("after a large chunk: %d bytes, dropped %v", len(got), out["dropped_bytes"])
	}
}

func TestSessionLimitAndLoss(t *testing.T) {
	e, b := newTerminalExecutor(Config{MaxSessions: 2})
	start := func() map[string]any {
		return runSandbox(t, e, messages.ToolExecCommand, map[string]any{"command": "sleep", "grace_seconds": 0})
	}
	first, second := start(), start()
	if first["session_id"] == nil || second["session_id"] == nil {
		t.Fatal("sessions did not start")
	}
	if code, _ := errorCode(start()); code != wire.CodeTooManyRequests {
		t.Fatalf("third session: %s", code)
	}
	// The sandbox went away under the first: it ends as lost and frees a place.
	b.started[0].end(0, errLost)
	eventually(t, func() bool {
		out := runSandbox(t, e, messages.ToolWriteStdin, map[string]any{"session_id": first["session_id"], "input": "", "wait_seconds": 0})
		return out["status"] == "lost" && out["alive"] == false && out["exit_code"] == nil
	})
	if third := start(); third["session_id"] == nil {
		t.Fatalf("no room after a session ended: %v", third)
	}
}

func TestEditFileTool(t *testing.T) {
	const src = "alpha = 1\nbeta  =  2\ngamma = 3\ngamma = 3\n"
	files := &fakeFiles{files: map[string]string{
		"/home/agent/workspace/a.txt":  src,
		"/mnt/user-data/uploads/u.txt": "upload",
	}}
	e := New(&sessionSandbox{backend: &fakeBackend{}}, files, Config{})
	tests := []struct {
		name     string
		input    map[string]any
		match    string
		want     string // the file afterwards
		code     string // error code, for refusals
		explains string
	}{
		{name: "exact", input: map[string]any{"path": "a.txt", "old_str": "alpha = 1", "new_str": "alpha = 10"}, match: "exact", want: "alpha = 10\nbeta  =  2\ngamma = 3\ngamma = 3\n"},
		{name: "whitespace", input: map[string]any{"path": "/home/agent/workspace/a.txt", "old_str": "beta = 2", "new_str": "beta = 20"}, match: "whitespace", want: "alpha = 1\nbeta = 20\ngamma = 3\ngamma = 3\n"},
		{name: "near", input: map[string]any{"path": "a.txt", "old_str": "alphx = 1", "new_str": "alpha = 11"}, match: "near", want: "alpha = 11\nbeta  =  2\ngamma = 3\ngamma = 3\n"},
		{name: "ambiguous", input: map[string]any{"path": "a.txt", "old_str": "gamma = 3", "new_str": "g"}, code: wire.CodeInvalidToolInput, explains: "matches 2 places (exact match)"},
		{name: "missing file", input: map[string]any{"path": "nope.txt", "old_str": "a", "new_str": "b"}, code: wire.CodeFileNotFound, explains: "File not found: /home/agent/workspace/nope.txt"},
		{name: "read-only", input: map[string]any{"path": "/mnt/user-data/uploads/u.txt", "old_str": "upload", "new_str": "b"}, code: wire.CodeInvalidToolInput, explains: "Path '/mnt/user-data/uploads/u.txt' is in a read-only mount"},
		{name: "outside", input: map[string]any{"path": "/etc/passwd", "old_str": "root", "new_str": "b"}, code: wire.CodeInvalidToolInput, explains: "Path '/etc/passwd' does not match any session mount"},
		{name: "empty old_str", input: map[string]any{"path": "a.txt", "old_str": "", "new_str": "b"}, code: wire.CodeInvalidToolInput, explains: "must not be empty"},
		{name: "no new_str", input: map[string]any{"path": "a.txt", "old_str": "a"}, code: wire.CodeInvalidToolInput, explains: "'new_str' is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files.files["/home/agent/workspace/a.txt"] = src
			out := runSandbox(t, e, messages.ToolEditFile, tc.input)
			if tc.code != "" {
				code, expl := errorCode(out)
				if code != tc.code || !strings.Contains(expl, tc.explains) {
					t.Fatalf("%s %q, want %s %q", code, expl, tc.code, tc.explains)
				}
				if files.files["/home/agent/workspace/a.txt"] != src {
					t.Fatal("a refused edit changed the file")
				}
				return
			}
			if out["type"] != "edit_file_result" || out["match"] != tc.match || out["path"] != "/home/agent/workspace/a.txt" {
				t.Fatalf("result %v", out)
			}
			if got := files.files["/home/agent/workspace/a.txt"]; got != tc.want {
				t.Fatalf("file %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSandboxBashInput(t *testing.T) {
	var seen []sandbox.Command
	sb := &sessionSandbox{backend: &fakeBackend{}, execFn: func(cmd sandbox.Command) (sandbox.Result, error) {
		seen = append(seen, cmd)
		if strings.Contains(cmd.Args[2], "find") {
			return sandbox.Result{Stdout: []byte("5\t/home/agent/workspace/b.txt\n3\t/home/agent/workspace/a.txt\n")}, nil
		}
		return sandbox.Result{ExitCode: 124, TimedOut: true, Stdout: []byte("x"), Stderr: []byte("Command timed out after 5s.")}, nil
	}}
	e := New(sb, nil, Config{})
	out := runSandbox(t, e, messages.ToolSandboxBash, map[string]any{"command": "sleep 9", "timeout_seconds": 5, "cwd": "sub", "description": "wait"})
	if out["exit_code"] != 124.0 || out["stderr"] != "Command timed out after 5s." || out["file_count"] != 2.0 || out["description"] != "wait" {
		t.Fatalf("result %v", out)
	}
	files := out["files"].([]any)
	if files[0].(map[string]any)["path"] != "/home/agent/workspace/a.txt" || files[1].(map[string]any)["size_bytes"] != 5.0 {
		t.Fatalf("files %v", files)
	}
	if c := seen[0]; c.Dir != "/home/agent/workspace/sub" || c.Timeout.Seconds() != 5 || len(c.Env) != 1 {
		t.Fatalf("command %+v", c)
	}
	for _, in := range []map[string]any{{"command": "x", "timeout_seconds": 0}, {"command": "x", "timeout_seconds": 3601}, {"command": "x", "timeout_seconds": 1.5}, {"command": " "}} {
		if code, _ := errorCode(runSandbox(t, e, messages.ToolSandboxBash, in)); code != wire.CodeInvalidToolInput {
			t.Errorf("input %v accepted", in)
		}
	}
}

func TestBSLCheckUnavailableAndDiagnostics(t *testing.T) {
	exit := 127
	sb := &sessionSandbox{backend: &fakeBackend{}, execFn: func(cmd sandbox.Command) (sandbox.Result, error) {
		if exit == 127 {
			return sandbox.Result{ExitCode: 127}, nil
		}
		return sandbox.Result{Stdout: []byte(`{"date":"x","fileinfos":[{"path":"file:///w/M.bsl","diagnostics":[{"range":{"start":{"line":1}},"severity":"Warning","code":"LineLength","message":"too long"}]}]}`)}, nil
	}}
	e := New(sb, nil, Config{})
	code, expl := errorCode(runSandbox(t, e, messages.ToolBSLCheck, map[string]any{"path": "M.bsl"}))
	if code != wire.CodeUnavailable || expl != BSLUnavailable {
		t.Fatalf("%s %q", code, expl)
	}
	exit = 0
	out := runSandbox(t, e, messages.ToolBSLCheck, map[string]any{"path": "M.bsl"})
	diags, _ := out["diagnostics"].([]any)
	if out["type"] != "bsl_check_result" || out["count"] != 1.0 || len(diags) != 1 || diags[0].(map[string]any)["code"] != "LineLength" || out["path"] != "/home/agent/workspace/M.bsl" {
		t.Fatalf("result %v", out)
	}
	if code, _ := errorCode(runSandbox(t, e, messages.ToolBSLCheck, map[string]any{"path": "notes.txt"})); code != wire.CodeInvalidToolInput {
		t.Fatal("a .txt file was analysed")
	}
}

// TestSandboxBashMetered checks that the user's sandbox_bash command is
// metered once with its CPU time, not the file listing that follows it,
// whatever ended it: one cut short by a dead sandbox counts, one that
// could not start (a missing cwd) or was refused does not.
func TestSandboxBashMetered(t *testing.T) {
	tests := []struct {
		name  string
		input map[string]any
		err   error
		want  int
	}{
		{"ran", map[string]any{"command": "true"}, nil, 1},
		{"cut short by its sandbox", map[string]any{"command": "true"}, sandbox.ErrUnavailable, 1},
		{"could not start", map[string]any{"command": "true", "cwd": "nope"}, errors.New("chdir: no such file"), 0},
		{"refused", map[string]any{"command": " "}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := &sessionSandbox{backend: &fakeBackend{}, execFn: func(cmd sandbox.Command) (sandbox.Result, error) {
				if cmd.Args[0] == "bash" && tt.err != nil {
					return sandbox.Result{}, tt.err
				}
				return sandbox.Result{Duration: 2 * time.Second, CPUTime: 1500 * time.Millisecond}, nil
			}}
			m := &fakeMeter{}
			runSandbox(t, New(sb, nil, Config{Meter: m}), messages.ToolSandboxBash, tt.input)
			if len(m.results) != tt.want || len(m.ends) != m.begun || (tt.want == 1 && tt.err == nil && m.results[0].CPUTime != 1500*time.Millisecond) {
				t.Fatalf("metered %+v (%d begun, %d ended), want %d commands", m.results, m.begun, len(m.ends), tt.want)
			}
		})
	}
}

// TestSandboxBashListsOnlyItsOwnFiles: the files a command wrote are those
// modified after its start, less a coarse-clock tick, but never those of
// the call before it in the container, however soon this one follows. A
// fast model once saw the previous command's file listed again.
func TestSandboxBashListsOnlyItsOwnFiles(t *testing.T) {
	var (
		mu    sync.Mutex
		since []time.Time // the listing's -newermt, one per call
		ends  []time.Time // when each call's command returned
	)
	sb := &sessionSandbox{backend: &fakeBackend{}, execFn: func(cmd sandbox.Command) (sandbox.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(cmd.Args) > 2 && cmd.Args[2] == listScript {
			sec, frac, _ := strings.Cut(cmd.Args[4], ".")
			s, _ := strconv.ParseInt(sec, 10, 64)
			ns, _ := strconv.ParseInt(frac, 10, 64)
			if len(frac) != 9 {
				t.Errorf("epoch %q: want nanoseconds", cmd.Args[4])
			}
			since = append(since, time.Unix(s, ns))
		} else {
			ends = append(ends, time.Now())
		}
		return sandbox.Result{}, nil
	}}
	e := New(sb, nil, Config{})
	before := time.Now()
	runSandbox(t, e, messages.ToolSandboxBash, map[string]any{"command": "echo data > made.txt"})
	runSandbox(t, e, messages.ToolSandboxBash, map[string]any{"command": "pwd"})
	if len(since) != 2 || len(ends) != 2 {
		t.Fatalf("%d listings, %d commands", len(since), len(ends))
	}
	// The first call lists from listSlack before its start.
	if since[0].Before(before.Add(-listSlack)) || since[0].After(ends[0].Add(-listSlack)) {
		t.Fatalf("first call lists from %v; it ran from %v to %v", since[0], before, ends[0])
	}
	if !since[1].After(ends[0]) {
		t.Fatalf("second call lists from %v, before the first call's command ended at %v", since[1], ends[0])
	}
}
