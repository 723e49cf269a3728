package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/app/messages"
	msgwire "threadbox/app/messages/wire"
	"threadbox/app/tools"
	"threadbox/infra/llm/fakeupstream"
)

var (
	codeExec2601 = []anthropic.ToolUnionParam{{OfCodeExecutionTool20260120: &anthropic.CodeExecutionTool20260120Param{}}}
	codeExec2605 = []anthropic.ToolUnionParam{{OfCodeExecutionTool20260521: &anthropic.CodeExecutionTool20260521Param{}}}
)

// pyStep is a model step running a Python cell with the code_execution
// sub-tool.
func pyStep(code string) msgwire.ContentBlock {
	return call(messages.SubToolCodeExecution, map[string]any{"code": code})
}

// pyResult checks that blocks i and i+1 are a Python cell and its result
// and returns the result.
func pyResult(t *testing.T, content []anthropic.ContentBlockUnion, i int) anthropic.CodeExecutionResultBlock {
	t.Helper()
	if len(content) < i+2 || content[i].Type != "server_tool_use" || content[i+1].Type != "code_execution_tool_result" {
		t.Fatalf("blocks %d-%d are not a Python cell and its result: %v", i, i+1, blockTypes(content))
	}
	use := content[i].AsServerToolUse()
	res := content[i+1].AsCodeExecutionToolResult()
	if !strings.HasPrefix(use.ID, "srvtoolu_") || use.Name != "code_execution" || res.ToolUseID != use.ID {
		t.Fatalf("call %q %q, result for %q", use.ID, use.Name, res.ToolUseID)
	}
	if res.Content.Type != "code_execution_result" {
		t.Fatalf("Python result is %s: %s", res.Content.Type, res.RawJSON())
	}
	return res.Content.AsResponseCodeExecutionResultBlock()
}

// TestPythonREPL runs the code_execution sub-tool of code_execution_20260120
// and code_execution_20260521 in a real Docker sandbox, through the official
// SDK, with a scripted model.
func TestPythonREPL(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "PYTHON_CELL_TIMEOUT": "3s",
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	t.Run("state survives between requests", func(t *testing.T) {
		fake.Push(steps(pyStep("import math\nx = 41\nf = open('notes.txt', 'w')")), textStep("set"))
		msg, err := cl.Messages.New(ctx, msgParams("py1", userText("set x"), codeExec2601...))
		if err != nil {
			t.Fatal(err)
		}
		r := pyResult(t, msg.Content, 0)
		if r.ReturnCode != 0 || r.Stdout != "" || r.Stderr != tools.FirstInterpreterNote {
			t.Fatalf("first cell %+v", r)
		}
		// The model saw the Python sub-tool beside the other two.
		first := lastUpstream(t, fake, 2)
		for _, want := range []string{`"name":"code_execution"`, `"name":"bash_code_execution"`, `"name":"text_editor_code_execution"`} {
			if !strings.Contains(first, want) {
				t.Fatalf("upstream request lacks %s: %s", want, first)
			}
		}
		if strings.Contains(first, "90-second") {
			t.Fatalf("code_execution_20260120's description names the cell limit: %s", first)
		}

		fake.Push(steps(pyStep("print(x + 1)\nf.write('kept open')\nf.close()\nprint(math.sqrt(16))\nprint('héllo ✓')\nimport subprocess\nsubprocess.run(['echo', 'from a child'])")), textStep("42"))
		// The client sends the conversation back, the first cell in it.
		history := append(userText("set x"), msg.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("print x + 1")))
		msg, err = cl.Messages.New(ctx, msgParams("py1", history, codeExec2601...))
		if err != nil {
			t.Fatal(err)
		}
		r = pyResult(t, msg.Content, 0)
		if r.ReturnCode != 0 || r.Stdout != "from a child\n42\n4.0\nhéllo ✓\n" || r.Stderr != "" {
			t.Fatalf("second cell %+v", r)
		}
		if msg.Container.ID != "py1" || codeExecRequests(t, msg) != 1 {
			t.Fatalf("container %+v, usage %s", msg.Container, msg.RawJSON())
		}
		// The model read the earlier cell as its own call and result, and
		// this cell's result as its tool_result.
		if before := lastUpstream(t, fake, 2); strings.Contains(before, `"server_tool_use"`) || !strings.Contains(before, `"type":"tool_use"`) || !strings.Contains(before, `x = 41`) {
			t.Fatalf("the earlier cell did not reach the model as its call: %s", before)
		}
		if second := lastUpstream(t, fake, 1); !strings.Contains(second, `"tool_result"`) || !strings.Contains(second, `42\\n`) {
			t.Fatalf("the model did not get the result: %s", second)
		}
	})

	t.Run("a sandbox restart starts a new interpreter", func(t *testing.T) {
		fake.Push(steps(call(msgwire.SubToolBash, map[string]any{"restart": true})), textStep("restarted"))
		if _, err := cl.Messages.New(ctx, msgParams("py1", userText("restart"), codeExec2601...)); err != nil {
			t.Fatal(err)
		}
		fake.Push(steps(pyStep("print(open('notes.txt').read())\nprint(x)")), textStep("gone"))
		msg, err := cl.Messages.New(ctx, msgParams("py1", userText("print x"), codeExec2601...))
		if err != nil {
			t.Fatal(err)
		}
		r := pyResult(t, msg.Content, 0)
		if r.ReturnCode != 1 || r.Stdout != "kept open\n" || !strings.HasPrefix(r.Stderr, tools.NewInterpreterNote) || !strings.Contains(r.Stderr, "NameError: name 'x' is not defined") {
			t.Fatalf("cell after the restart %+v", r)
		}
		// The new interpreter keeps state from here on.
		fake.Push(steps(pyStep("x = 1")), steps(pyStep("print(x)")), textStep("1"))
		msg, err = cl.Messages.New(ctx, msgParams("py1", userText("again"), codeExec2601...))
		if err != nil {
			t.Fatal(err)
		}
		if r := pyResult(t, msg.Content, 2); r.Stdout != "1\n" || r.Stderr != "" {
			t.Fatalf("new interpreter %+v", r)
		}
	})

	t.Run("a cell over its limit ends with detection_timeout and the next runs", func(t *testing.T) {
		fake.Push(steps(pyStep("y = 7")), steps(pyStep("import time\nprint('start', flush=True)\ntime.sleep(100)\nprint('never')")), steps(pyStep("print(y * 6)")), textStep("done"))
		start := time.Now()
		msg, err := cl.Messages.New(ctx, msgParams("py2", userText("slow"), codeExec2605...))
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 60*time.Second {
			t.Fatalf("the turn took %s: the 3s cell limit did not stop the cell", d)
		}
		slow := pyResult(t, msg.Content, 2)
		if slow.ReturnCode == 0 || slow.Stdout != "start\n" || !strings.Contains(slow.Stderr, "detection_timeout") {
			t.Fatalf("slow cell %+v", slow)
		}
		if next := pyResult(t, msg.Content, 4); next.ReturnCode != 0 || next.Stdout != "42\n" {
			t.Fatalf("cell after the timeout %+v", next)
		}
		if first := lastUpstream(t, fake, 4); !strings.Contains(first, "90-second wall-clock limit") {
			t.Fatalf("code_execution_20260521's description lacks the cell limit: %s", first)
		}
	})

	t.Run("output files come back", func(t *testing.T) {
		fake.Push(steps(pyStep("import os\n"+
			"with open(os.path.join(os.environ['OUTPUT_DIR'], 'report.csv'), 'w') as f:\n    f.write('a,b\\n')\n"+
			"with open('/mnt/user-data/outputs/direct.txt', 'w') as f:\n    f.write('d')")), textStep("saved"))
		msg, err := cl.Messages.New(ctx, msgParams("py2", userText("save"), codeExec2605...))
		if err != nil {
			t.Fatal(err)
		}
		r := pyResult(t, msg.Content, 0)
		if r.ReturnCode != 0 || len(r.Content) != 2 {
			t.Fatalf("cell %+v", r)
		}
		for i, want := range []string{"/mnt/user-data/outputs/report.csv", "/mnt/user-data/outputs/direct.txt"} {
			if p, _ := base64.RawURLEncoding.DecodeString(r.Content[i].FileID); string(p) != want || r.Content[i].Type != "code_execution_output" {
				t.Fatalf("output file %d %+v = %q, want %s", i, r.Content[i], p, want)
			}
		}
	})

	t.Run("a thread printing between cells does not break their results", func(t *testing.T) {
		fake.Push(
			steps(pyStep("import threading, time, subprocess\nstop = False\n"+
				"def chatter():\n    while not stop:\n        print('thread ' * 40)\n        time.sleep(0.002)\n"+
				"threading.Thread(target=chatter, daemon=True).start()\n"+
				"child = subprocess.Popen(['sh', '-c', 'while :; do echo child; sleep 0.003; done'])")),
			steps(pyStep("big = 'é' * 100000\nprint(big)")),
			steps(pyStep("stop = True\nchild.kill()\nchild.wait()\nprint(len(big))")),
			textStep("done"),
		)
		msg, err := cl.Messages.New(ctx, msgParams("py5", userText("noisy"), codeExec2601...))
		if err != nil {
			t.Fatal(err)
		}
		if r := pyResult(t, msg.Content, 2); r.ReturnCode != 0 || !strings.Contains(r.Stdout, strings.Repeat("é", 100000)) {
			t.Fatalf("big cell: return code %d, %d bytes of stdout", r.ReturnCode, len(r.Stdout))
		}
		if r := pyResult(t, msg.Content, 4); r.ReturnCode != 0 || !strings.HasSuffix(r.Stdout, "100000\n") {
			t.Fatalf("last cell %+v", r)
		}
	})

	t.Run("streaming and non-streaming give the same blocks", func(t *testing.T) {
		script := func() {
			fake.Push(
				fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: "computing"}, pyStep("z = sum(range(10))\nprint(z)")}},
				steps(pyStep("import sys\nprint('err', file=sys.stderr)\nprint(z * 2)")),
				textStep("z is 45"),
			)
		}
		script()
		plain, err := cl.Messages.New(ctx, msgParams("py3", userText("sum"), codeExec2601...))
		if err != nil {
			t.Fatal(err)
		}
		script()
		stream := cl.Messages.NewStreaming(ctx, msgParams("py4", userText("sum"), codeExec2601...))
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if r := pyResult(t, plain.Content, 3); r.Stdout != "90\n" || r.Stderr != "err\n" {
			t.Fatalf("second cell %+v", r)
		}
		a, b := normalBlocks(t, plain.Content), normalBlocks(t, acc.Content)
		if a != b {
			t.Fatalf("blocks differ:\nnon-streaming %s\nstreaming     %s", a, b)
		}
		if plain.StopReason != acc.StopReason || acc.Container.ID != "py4" {
			t.Fatalf("stop %s / %s, container %+v", plain.StopReason, acc.StopReason, acc.Container)
		}
	})
}

var blockIDs = regexp.MustCompile(`"(id|tool_use_id)":"[^"]*"`)

// normalBlocks is the content as JSON with the ids of calls left out (each
// run makes its own).
func normalBlocks(t *testing.T, content []anthropic.ContentBlockUnion) string {
	t.Helper()
	var out []json.RawMessage
	for _, b := range content {
		var v any
		if err := json.Unmarshal([]byte(b.RawJSON()), &v); err != nil {
			t.Fatalf("block %s: %v", b.RawJSON(), err)
		}
		j, _ := json.Marshal(v) // sorted keys, no spacing
		out = append(out, j)
	}
	j, _ := json.Marshal(out)
	return blockIDs.ReplaceAllString(string(j), `"$1":"…"`)
}

// TestPythonREPLIdleStop checks that a running cell keeps its sandbox from
// the idle sweeper, and what the idle stop does to the interpreter: where
// the backend checkpoints (gvisor) the sandbox is saved at the stop and
// restored at the next cell, whose interpreter still holds x; where it
// keeps files only (docker) the interpreter ends, and the next cell says a
// new one started.
func TestPythonREPLIdleStop(t *testing.T) {
	tests := []struct {
		backend string
		need    func(t *testing.T) string
		running func(t *testing.T, s *server) bool
		kept    bool
	}{
		{"gvisor", needGvisor, gvisorRunning, true},
		{"docker", needDocker, dockerRunning, false},
	}
	for _, tc := range tests {
		t.Run(tc.backend, func(t *testing.T) {
			bin := tc.need(t)
			settings := map[string]string{
				"SANDBOX_BACKEND": tc.backend, "THREADBOX_AGENT_BIN": bin, "SANDBOX_IDLE": "2s", "SWEEP_INTERVAL": "300ms",
			}
			if tc.backend == "gvisor" {
				settings["THREADBOX_INSTANCE"] = gvisorInstance(t)
			}
			s, fake := modelServer(t, "", "anthropic", settings)
			tok := s.bootstrap("acme", "admin@acme.test")
			cl := msgClient(s, tok)
			ctx := context.Background()
			cell := func(code string) anthropic.CodeExecutionResultBlock {
				t.Helper()
				fake.Push(steps(pyStep(code)), textStep("ok"))
				msg, err := cl.Messages.New(ctx, msgParams("idle1", userText("run"), codeExec2601...))
				if err != nil {
					t.Fatal(err)
				}
				return pyResult(t, msg.Content, 0)
			}

			// Longer than the idle period: the sweeper must leave the sandbox be.
			if r := cell("x = 41\nimport time\ntime.sleep(5)\nprint(x)"); r.ReturnCode != 0 || r.Stdout != "41\n" {
				t.Fatalf("long cell %+v", r)
			}
			if r := cell("print(x + 1)"); r.Stdout != "42\n" || r.Stderr != "" {
				t.Fatalf("cell after the long one %+v", r)
			}
			for deadline := time.Now().Add(30 * time.Second); tc.running(t, s); time.Sleep(200 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the idle sandbox was not stopped")
				}
			}
			if tc.kept {
				if r := cell("print(x + 1)"); r.ReturnCode != 0 || r.Stdout != "42\n" || r.Stderr != "" {
					t.Fatalf("cell after the idle stop %+v: want the interpreter restored with x", r)
				}
				return
			}
			r := cell("print(x)")
			if r.ReturnCode != 1 || !strings.HasPrefix(r.Stderr, tools.NewInterpreterNote) || !strings.Contains(r.Stderr, "NameError") {
				t.Fatalf("cell after the idle stop %+v", r)
			}
		})
	}
}

// dockerRunning reports whether a Docker sandbox of s's instance runs.
func dockerRunning(t *testing.T, s *server) bool {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-q", "--filter", "name=threadbox-"+s.env["THREADBOX_INSTANCE"]+"-").Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.TrimSpace(string(out)) != ""
}

// TestPythonREPLProviders keeps a variable between requests whatever the
// model's wire format: the Python sub-tool is a plain tool to the model.
func TestPythonREPLProviders(t *testing.T) {
	bin := needDocker(t)
	for _, provider := range []string{"anthropic", "openai"} {
		t.Run(provider, func(t *testing.T) {
			s, fake := modelServer(t, "", provider, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
			cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
			ctx := context.Background()
			fake.Push(steps(pyStep("x = 41")), textStep("set"))
			first, err := cl.Messages.New(ctx, msgParams("box", userText("set x"), codeExec2605...))
			if err != nil {
				t.Fatal(err)
			}
			fake.Push(steps(pyStep("print(x + 1)")), textStep("42"))
			history := append(userText("set x"), first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("and now")))
			msg, err := cl.Messages.New(ctx, msgParams("box", history, codeExec2605...))
			if err != nil {
				t.Fatal(err)
			}
			if r := pyResult(t, msg.Content, 0); r.Stdout != "42\n" || r.ReturnCode != 0 {
				t.Fatalf("second cell %+v", r)
			}
		})
	}
}

func TestPythonCellTimeoutSetting(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration // 0: a config error naming the variable
	}{
		{"", 90 * time.Second},
		{"3s", 3 * time.Second},
		{"soon", 0},
		{"-1s", 0},
	}
	for _, tc := range tests {
		cfg, err := loadConfig(func(k string) string {
			if k == "PYTHON_CELL_TIMEOUT" {
				return tc.value
			}
			return ""
		})
		if tc.want == 0 {
			var ce *configError
			if !errors.As(err, &ce) || ce.name != "PYTHON_CELL_TIMEOUT" {
				t.Errorf("%q: want a config error naming PYTHON_CELL_TIMEOUT, got %v", tc.value, err)
			}
			continue
		}
		if err != nil || cfg.PythonCellTimeout != tc.want {
			t.Errorf("%q: %v, %v", tc.value, cfg.PythonCellTimeout, err)
		}
	}
}
