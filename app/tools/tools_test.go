package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

func call(name, input string) messages.ToolCall {
	return messages.ToolCall{ID: "srvtoolu_1", Name: name, Input: json.RawMessage(input), ContainerID: "c1"}
}

func run(t *testing.T, e *Executor, name, input string) *wire.ToolResult {
	t.Helper()
	r, err := e.Execute(context.Background(), call(name, input))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return r
}

func wantError(t *testing.T, r *wire.ToolResult, typ, code, explanation string) {
	t.Helper()
	if r.Type != typ || r.ErrorCode != code || r.Detail == nil || r.Detail.Code != code {
		t.Fatalf("got %+v (detail %+v), want %s/%s", r, r.Detail, typ, code)
	}
	if explanation != "" && r.Detail.Explanation != explanation {
		t.Fatalf("explanation = %q, want %q", r.Detail.Explanation, explanation)
	}
}

func TestBash(t *testing.T) {
	big := strings.Repeat("x", 100)
	tests := []struct {
		name    string
		input   string
		result  sandbox.Result
		err     error
		want    *wire.ToolResult
		wantCmd func(t *testing.T, c sandbox.Command)
	}{
		{
			name:   "runs in a new shell in the workspace with the default timeout",
			input:  `{"command":"echo hi"}`,
			result: sandbox.Result{Stdout: []byte("hi\n")},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stdout: "hi\n", Files: []wire.OutputFile{}},
			wantCmd: func(t *testing.T, c sandbox.Command) {
				if !reflect.DeepEqual(c.Args, []string{"bash", "-c", "echo hi"}) || c.Dir != sandbox.WorkspaceDir ||
					c.Timeout != 60*time.Second || !c.OutputDir || c.MaxOutput != 64 {
					t.Fatalf("command = %+v", c)
				}
			},
		},
		{
			name:   "non-zero exit is a result",
			input:  `{"command":"false","timeout":5}`,
			result: sandbox.Result{ExitCode: 1, Stderr: []byte("boom")},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stderr: "boom", ReturnCode: 1, Files: []wire.OutputFile{}},
			wantCmd: func(t *testing.T, c sandbox.Command) {
				if c.Timeout != 5*time.Second {
					t.Fatalf("timeout = %v", c.Timeout)
				}
			},
		},
		{
			name:  "a huge timeout is the maximum, not an overflow to none",
			input: `{"command":"true","timeout":1e10}`,
			want:  &wire.ToolResult{Type: wire.ResultBash, Files: []wire.OutputFile{}},
			wantCmd: func(t *testing.T, c sandbox.Command) {
				if c.Timeout != DefaultMaxTimeout {
					t.Fatalf("timeout = %v", c.Timeout)
				}
			},
		},
		{
			name:  "a tiny timeout is a millisecond, not zero (none)",
			input: `{"command":"true","timeout":1e-10}`,
			want:  &wire.ToolResult{Type: wire.ResultBash, Files: []wire.OutputFile{}},
			wantCmd: func(t *testing.T, c sandbox.Command) {
				if c.Timeout != time.Millisecond {
					t.Fatalf("timeout = %v", c.Timeout)
				}
			},
		},
		{
			name:   "timeout gives 124 and the contract's message",
			input:  `{"command":"sleep 100","timeout":2}`,
			result: sandbox.Result{ExitCode: -1, TimedOut: true},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stderr: "Command timed out after 2s.", ReturnCode: 124, Files: []wire.OutputFile{}},
		},
		{
			name:   "timeout message follows earlier stderr",
			input:  `{"command":"x"}`,
			result: sandbox.Result{TimedOut: true, Stderr: []byte("partial")},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stderr: "partial\nCommand timed out after 60s.", ReturnCode: 124, Files: []wire.OutputFile{}},
		},
		{
			name:   "output over the cap is truncated",
			input:  `{"command":"yes"}`,
			result: sandbox.Result{Stdout: []byte(big), StderrTruncated: true, Stderr: []byte("e")},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stdout: big[:64] + "...[truncated]", Stderr: "e...[truncated]", Files: []wire.OutputFile{}},
		},
		{
			name:   "out of memory is said in stderr",
			input:  `{"command":"hog"}`,
			result: sandbox.Result{ExitCode: 137, OOMKilled: true},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stderr: "The command was killed: the sandbox ran out of memory.", ReturnCode: 137, Files: []wire.OutputFile{}},
		},
		{
			name:   "a warning of the sandbox is said in stderr",
			input:  `{"command":"make"}`,
			result: sandbox.Result{Stderr: []byte("e"), Warning: "outputs: rename x: is a directory; the files not moved are kept in /tmp/o/1-2"},
			want:   &wire.ToolResult{Type: wire.ResultBash, Stderr: "e\n[threadbox] outputs: rename x: is a directory; the files not moved are kept in /tmp/o/1-2", Files: []wire.OutputFile{}},
		},
		{
			name:   "output files are listed by file id",
			input:  `{"command":"make"}`,
			result: sandbox.Result{OutputFiles: []string{"/mnt/user-data/outputs/chart.png"}},
			want: &wire.ToolResult{Type: wire.ResultBash, Files: []wire.OutputFile{
				{Type: "bash_code_execution_output", FileID: file.EncodeID("/mnt/user-data/outputs/chart.png")},
			}},
		},
		{
			name:  "sandbox failure is unavailable",
			input: `{"command":"ls"}`,
			err:   fault.Wrap(fault.Unavailable, "sandbox exec failed (error id err_1)", sandbox.ErrUnavailable),
			want:  messages.ErrorResult(wire.SubToolBash, wire.CodeUnavailable, "The sandbox is unavailable: sandbox exec failed (error id err_1)"),
		},
		{
			name:  "missing command",
			input: `{}`,
			want:  messages.ErrorResult(wire.SubToolBash, wire.CodeInvalidToolInput, "Invalid input: 'command' is required."),
		},
		{
			name:  "wrong type",
			input: `{"command":5}`,
			want:  messages.ErrorResult(wire.SubToolBash, wire.CodeInvalidToolInput, "Invalid input: 'command' must be of type string."),
		},
		{
			name:  "negative timeout",
			input: `{"command":"ls","timeout":-1}`,
			want:  messages.ErrorResult(wire.SubToolBash, wire.CodeInvalidToolInput, "Invalid input: 'timeout' must be a positive number of seconds."),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb := &fakeSandbox{result: tc.result, err: tc.err}
			e := New(sb, newFakeFiles(), Config{MaxOutput: 64})
			got := run(t, e, wire.SubToolBash, tc.input)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v %+v\nwant %+v %+v", got, got.Detail, tc.want, tc.want.Detail)
			}
			if tc.wantCmd != nil {
				if len(sb.cmds) != 1 {
					t.Fatalf("ran %d commands", len(sb.cmds))
				}
				tc.wantCmd(t, sb.cmds[0])
			}
		})
	}
}

func TestBashRestart(t *testing.T) {
	sb := &fakeSandbox{result: sandbox.Result{Stdout: []byte("ok")}}
	e := New(sb, nil, Config{})
	r := run(t, e, wire.SubToolBash, `{"command":"echo ok","restart":true}`)
	if sb.restarts != 1 || len(sb.cmds) != 1 || r.Stdout != "ok" {
		t.Fatalf("restarts=%d cmds=%d result=%+v", sb.restarts, len(sb.cmds), r)
	}
	r = run(t, e, wire.SubToolBash, `{"restart":true}`)
	if sb.restarts != 2 || len(sb.cmds) != 1 || r.Type != wire.ResultBash || r.ReturnCode != 0 {
		t.Fatalf("restart without command: restarts=%d cmds=%d result=%+v", sb.restarts, len(sb.cmds), r)
	}
}

func TestNotConfigured(t *testing.T) {
	e := New(nil, nil, Config{})
	wantError(t, run(t, e, wire.SubToolBash, `{"command":"ls"}`), wire.ResultBashError, wire.CodeUnavailable, "code_execution provider is not configured.")
	wantError(t, run(t, e, wire.SubToolTextEditor, `{"command":"view","path":"a"}`), wire.ResultEditorError, wire.CodeUnavailable, "code_execution provider is not configured.")
}

func TestCancelStopsCommand(t *testing.T) {
	sb := &fakeSandbox{block: true}
	e := New(sb, nil, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Execute(ctx, call(wire.SubToolBash, `{"command":"sleep 1000"}`))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return after cancel")
	}
}

const config = "{\n  \"setting\": \"value\",\n  \"debug\": true\n}"

func TestEditor(t *testing.T) {
	ws := sandbox.WorkspaceDir + "/"
	tests := []struct {
		name      string
		input     string
		want      *wire.ToolResult
		wantFile  string // path to check afterwards
		wantBytes string
	}{
		{
			name:  "view whole file",
			input: `{"command":"view","path":"config.json"}`,
			want:  &wire.ToolResult{Type: wire.ResultEditorView, FileType: "text", FileContent: config, NumLines: 4, StartLine: 1, TotalLines: 4},
		},
		{
			name:  "view range",
			input: `{"command":"view","path":"/home/agent/workspace/config.json","view_range":[2,3]}`,
			want:  &wire.ToolResult{Type: wire.ResultEditorView, FileType: "text", FileContent: "  \"setting\": \"value\",\n  \"debug\": true", NumLines: 2, StartLine: 2, TotalLines: 4},
		},
		{
			name:  "view range to end",
			input: `{"command":"view","path":"config.json","view_range":[3,-1]}`,
			want:  &wire.ToolResult{Type: wire.ResultEditorView, FileType: "text", FileContent: "  \"debug\": true\n}", NumLines: 2, StartLine: 3, TotalLines: 4},
		},
		{
			name:  "view bad range",
			input: `{"command":"view","path":"config.json","view_range":[5,6]}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Invalid 'view_range' [5 6]: start must be between 1 and 4, the file's number of lines."),
		},
		{
			name:  "view directory lists it",
			input: `{"command":"view","path":"."}`,
			want:  &wire.ToolResult{Type: wire.ResultEditorView, FileType: "text", FileContent: "config.json\nlines.txt\nsrc/", NumLines: 3, StartLine: 1, TotalLines: 3},
		},
		{
			name:  "view missing file",
			input: `{"command":"view","path":"missing.txt"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeFileNotFound, "File not found: /home/agent/workspace/missing.txt"),
		},
		{
			name:  "view outside the mounts",
			input: `{"command":"view","path":"/etc/passwd"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Path '/etc/passwd' does not match any session mount"),
		},
		{
			name:  "view uploads is allowed",
			input: `{"command":"view","path":"/mnt/user-data/uploads/in.csv"}`,
			want:  &wire.ToolResult{Type: wire.ResultEditorView, FileType: "text", FileContent: "a,b\n1,2", NumLines: 2, StartLine: 1, TotalLines: 2},
		},
		{
			name:      "create new file",
			input:     `{"command":"create","path":"new_file.txt","file_text":"Hello, World!"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorCreate, IsFileUpdate: false},
			wantFile:  ws + "new_file.txt",
			wantBytes: "Hello, World!",
		},
		{
			name:      "create over existing file",
			input:     `{"command":"create","path":"config.json","file_text":"{}"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorCreate, IsFileUpdate: true},
			wantFile:  ws + "config.json",
			wantBytes: "{}",
		},
		{
			name:  "create in uploads is read-only",
			input: `{"command":"create","path":"/mnt/user-data/uploads/x.txt","file_text":"x"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Path '/mnt/user-data/uploads/x.txt' is in a read-only mount"),
		},
		{
			name:  "create in skills is read-only",
			input: `{"command":"create","path":"/mnt/skills/pdf/SKILL.md","file_text":"x"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Path '/mnt/skills/pdf/SKILL.md' is in a read-only mount"),
		},
		{
			name:  "create outside the mounts",
			input: `{"command":"create","path":"/tmp/x","file_text":"x"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Path '/tmp/x' does not match any session mount"),
		},
		{
			name:      "create in outputs",
			input:     `{"command":"create","path":"/mnt/user-data/outputs/r.md","file_text":"# r\n"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorCreate},
			wantFile:  "/mnt/user-data/outputs/r.md",
			wantBytes: "# r\n",
		},
		{
			name:      "str_replace as in the contract",
			input:     `{"command":"str_replace","path":"config.json","old_str":"\"debug\": true","new_str":"\"debug\": false"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorStrReplace, OldStart: 3, OldLines: 1, NewStart: 3, NewLines: 1, Lines: []string{"-  \"debug\": true", "+  \"debug\": false"}},
			wantFile:  ws + "config.json",
			wantBytes: "{\n  \"setting\": \"value\",\n  \"debug\": false\n}",
		},
		{
			name:      "str_replace of whole lines",
			input:     `{"command":"str_replace","path":"lines.txt","old_str":"two\nthree\n","new_str":"2\n"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorStrReplace, OldStart: 2, OldLines: 2, NewStart: 2, NewLines: 1, Lines: []string{"-two", "-three", "+2"}},
			wantFile:  ws + "lines.txt",
			wantBytes: "one\n2\nfour\n",
		},
		{
			name:      "str_replace deleting a line",
			input:     `{"command":"str_replace","path":"lines.txt","old_str":"two\n","new_str":""}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorStrReplace, OldStart: 2, OldLines: 1, NewStart: 2, NewLines: 0, Lines: []string{"-two"}},
			wantFile:  ws + "lines.txt",
			wantBytes: "one\nthree\nfour\n",
		},
		{
			name:  "str_replace absent",
			input: `{"command":"str_replace","path":"config.json","old_str":"nope","new_str":"x"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "No replacement was performed: old_str did not appear verbatim in /home/agent/workspace/config.json."),
		},
		{
			name:  "str_replace not unique",
			input: `{"command":"str_replace","path":"config.json","old_str":"\"","new_str":"'"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "No replacement was performed: old_str occurs 6 times in /home/agent/workspace/config.json; it must occur exactly once."),
		},
		{
			name:  "str_replace missing file",
			input: `{"command":"str_replace","path":"missing.txt","old_str":"a","new_str":"b"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeFileNotFound, "File not found: /home/agent/workspace/missing.txt"),
		},
		{
			name:  "str_replace in uploads",
			input: `{"command":"str_replace","path":"/mnt/user-data/uploads/in.csv","old_str":"a","new_str":"b"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Path '/mnt/user-data/uploads/in.csv' is in a read-only mount"),
		},
		{
			name:      "insert at start",
			input:     `{"command":"insert","path":"lines.txt","insert_line":0,"insert_text":"zero"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorStrReplace, OldStart: 1, OldLines: 0, NewStart: 1, NewLines: 1, Lines: []string{"+zero"}},
			wantFile:  ws + "lines.txt",
			wantBytes: "zero\none\ntwo\nthree\nfour\n",
		},
		{
			name:      "insert after a line",
			input:     `{"command":"insert","path":"lines.txt","insert_line":2,"insert_text":"a\nb\n"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorStrReplace, OldStart: 3, OldLines: 0, NewStart: 3, NewLines: 2, Lines: []string{"+a", "+b"}},
			wantFile:  ws + "lines.txt",
			wantBytes: "one\ntwo\na\nb\nthree\nfour\n",
		},
		{
			name:      "insert at end",
			input:     `{"command":"insert","path":"lines.txt","insert_line":4,"insert_text":"five"}`,
			want:      &wire.ToolResult{Type: wire.ResultEditorStrReplace, OldStart: 5, OldLines: 0, NewStart: 5, NewLines: 1, Lines: []string{"+five"}},
			wantFile:  ws + "lines.txt",
			wantBytes: "one\ntwo\nthree\nfour\nfive\n",
		},
		{
			name:  "insert past the end",
			input: `{"command":"insert","path":"lines.txt","insert_line":9,"insert_text":"x"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Invalid 'insert_line' 9: it must be between 0 and 4, the file's number of lines."),
		},
		{
			name:  "unknown command",
			input: `{"command":"delete","path":"config.json"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, `Invalid input: unknown command "delete"; use view, create, str_replace or insert.`),
		},
		{
			name:  "missing path",
			input: `{"command":"view"}`,
			want:  messages.ErrorResult(wire.SubToolTextEditor, wire.CodeInvalidToolInput, "Invalid input: 'path' is required."),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeFiles()
			fs.files[ws+"config.json"] = config
			fs.files[ws+"lines.txt"] = "one\ntwo\nthree\nfour\n"
			fs.files[ws+"src/main.go"] = "package main\n"
			fs.files["/mnt/user-data/uploads/in.csv"] = "a,b\n1,2\n"
			fs.files["/mnt/skills/pdf/SKILL.md"] = "# pdf\n"
			e := New(&fakeSandbox{}, fs, Config{})
			got := run(t, e, wire.SubToolTextEditor, tc.input)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v %+v\nwant %+v %+v", got, got.Detail, tc.want, tc.want.Detail)
			}
			if tc.wantFile != "" && fs.files[tc.wantFile] != tc.wantBytes {
				t.Fatalf("%s = %q, want %q", tc.wantFile, fs.files[tc.wantFile], tc.wantBytes)
			}
		})
	}
}

func TestEditorTimeout(t *testing.T) {
	fs := newFakeFiles()
	fs.block = true
	e := New(nil, fs, Config{FileOpTimeout: 20 * time.Millisecond})
	wantError(t, run(t, e, wire.SubToolTextEditor, `{"command":"view","path":"a.txt"}`),
		wire.ResultEditorError, wire.CodeExecutionTimeExceeded, "The file operation timed out after 0.02s.")
}

func TestEditorViewTruncates(t *testing.T) {
	fs := newFakeFiles()
	fs.files[sandbox.WorkspaceDir+"/big.txt"] = strings.Repeat("a", 100)
	e := New(nil, fs, Config{MaxOutput: 10})
	r := run(t, e, wire.SubToolTextEditor, `{"command":"view","path":"big.txt"}`)
	if r.FileContent != "aaaaaaaaaa...[truncated]" {
		t.Fatalf("content = %q", r.FileContent)
	}
}

// TestBashHidesHostDetails: a sandbox error that is not written for the
// caller (a backend's, naming host paths) reaches the tool result only as
// an error id, and the log gets the cause with that id.
func TestBashHidesHostDetails(t *testing.T) {
	var logged bytes.Buffer
	cause := errors.New("docker: mount /srv/threadbox/data/containers/thr_1/workspace: not a directory (unix:///var/run/docker.sock)")
	e := New(&fakeSandbox{err: cause}, newFakeFiles(), Config{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	got := run(t, e, wire.SubToolBash, `{"command":"ls"}`)
	expl := got.Detail.Explanation
	eid := regexp.MustCompile(`err_[0-9a-z]+`).FindString(expl)
	if got.ErrorCode != wire.CodeUnavailable || strings.Contains(expl, "/srv") || strings.Contains(expl, "docker") || eid == "" {
		t.Fatalf("explanation %q", expl)
	}
	if !strings.Contains(logged.String(), eid) || !strings.Contains(logged.String(), "/srv/threadbox") {
		t.Fatalf("log %q lacks the id %s or the cause", logged.String(), eid)
	}
}

func TestBashOutputFileTooLarge(t *testing.T) {
	files := newFakeFiles()
	files.files["/mnt/user-data/outputs/big.bin"] = strings.Repeat("x", 100)
	files.files["/mnt/user-data/outputs/small.txt"] = "ok"
	sb := &fakeSandbox{result: sandbox.Result{OutputFiles: []string{"/mnt/user-data/outputs/small.txt", "/mnt/user-data/outputs/big.bin"}}}
	e := New(sb, files, Config{MaxOutputFileBytes: 10})
	r := run(t, e, wire.SubToolBash, `{"command":"make"}`)
	wantError(t, r, "bash_code_execution_tool_result_error", wire.CodeOutputFileTooLarge,
		"The output file /mnt/user-data/outputs/big.bin is 100 bytes, more than the 10 bytes a result may hand back; it stays in the outputs folder.")
	sb.result.OutputFiles = sb.result.OutputFiles[:1]
	if r := run(t, e, wire.SubToolBash, `{"command":"make"}`); r.IsError() || len(r.Files) != 1 {
		t.Fatalf("a small output file: %+v", r)
	}
}

// fakeMeter records the commands begun and how each ended; it counts
// them as app/usage does: every ending but one marked
// sandbox.ErrNotStarted.
type fakeMeter struct {
	mu         sync.Mutex
	begun      int
	containers []string
	results    []sandbox.Result // of the commands counted
	ends       []error          // of every command ended
}

func (m *fakeMeter) Begin(_ context.Context, containerID string) func(sandbox.Result, error) {
	m.mu.Lock()
	m.begun++
	m.mu.Unlock()
	return func(res sandbox.Result, err error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.ends = append(m.ends, err)
		if !errors.Is(err, sandbox.ErrNotStarted) {
			m.containers = append(m.containers, containerID)
			m.results = append(m.results, res)
		}
	}
}

// TestBashMetersCommands checks that a bash command is metered with its
// container and result (CPU time included) whatever ended it: a command
// cut short by its sandbox counts; one that never started (its sandbox
// could not boot) or was refused does not.
func TestBashMetersCommands(t *testing.T) {
	ran := sandbox.Result{Stdout: []byte("ok"), Duration: 3 * time.Second, CPUTime: 2 * time.Second}
	tests := []struct {
		name  string
		input string
		exit  int
		err   error
		want  int
	}{
		{"ran", `{"command":"true"}`, 0, nil, 1},
		{"non-zero exit still ran", `{"command":"false"}`, 1, nil, 1},
		{"cut short by its sandbox", `{"command":"true"}`, 0, errors.New("boom"), 1},
		{"never started", `{"command":"true"}`, 0, sandbox.NotStarted(errors.New("no image")), 0},
		{"invalid input", `{"timeout":1}`, 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &fakeMeter{}
			res := ran
			res.ExitCode = tt.exit
			e := New(&fakeSandbox{result: res, err: tt.err}, newFakeFiles(), Config{Meter: m})
			run(t, e, wire.SubToolBash, tt.input)
			if len(m.results) != tt.want || len(m.ends) != m.begun {
				t.Fatalf("metered %d commands, want %d; %d begun, %d ended", len(m.results), tt.want, m.begun, len(m.ends))
			}
			if tt.want == 1 && (m.containers[0] != call("", "").ContainerID || m.results[0].CPUTime != ran.CPUTime || m.results[0].Duration != ran.Duration) {
				t.Fatalf("metered %v %+v", m.containers, m.results)
			}
		})
	}
}
