package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/file"
)

func TestCodeBlocks(t *testing.T) {
	msg := "Do this:\n```bash\necho one\n```\nthen\n```python\nprint(2)\n```\n```js\nconsole.log(3)\n```\n  ```sh\nls\n  ```\n```\nplain\n```"
	got := CodeBlocks(msg)
	want := []Block{{"bash", "echo one"}, {"python", "print(2)"}, {"bash", "ls"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("block %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// localExec runs bash commands on this host, in a temp dir, as a stand-in
// for a sandbox.
type localExec struct {
	t    *testing.T
	dir  string
	cmds []string
}

func (l *localExec) Execute(ctx context.Context, c messages.ToolCall) (*wire.ToolResult, error) {
	var in struct{ Command string }
	if err := json.Unmarshal(c.Input, &in); err != nil {
		l.t.Fatalf("input %s: %v", c.Input, err)
	}
	l.cmds = append(l.cmds, in.Command)
	cmd := exec.CommandContext(ctx, "bash", "-c", in.Command)
	cmd.Dir = l.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			return nil, err
		}
		code = ee.ExitCode()
	}
	r := &wire.ToolResult{Type: wire.ResultBash, Stdout: out.String(), Stderr: errb.String(), ReturnCode: code}
	if strings.Contains(in.Command, "report") {
		r.Files = []wire.OutputFile{{Type: wire.ResultBashOutput, FileID: file.EncodeID("/mnt/user-data/outputs/report.txt")}}
	}
	return r, nil
}

func needPython(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is required")
		}
		t.Skip("python3 not installed")
	}
}

func userRequest(text string, stream bool) *wire.Request {
	return &wire.Request{
		Model: "default", MaxTokens: 100, Stream: stream,
		Messages: []wire.Message{{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: text}}}},
		Tools:    []wire.Tool{{Type: wire.ToolTypeCodeExecution2508, Name: "code_execution"}},
	}
}

func TestRunsBlocksInOrder(t *testing.T) {
	needPython(t)
	for _, stream := range []bool{false, true} {
		ex := &localExec{t: t, dir: t.TempDir()}
		svc := messages.New(New(), messages.Tools{CodeExecution: ex}, messages.Config{})
		msg := "Please run:\n```bash\necho hello > a.txt && echo report\n```\nand\n```python\nimport sys\nprint(open('a.txt').read().strip().upper())\nsys.exit(3)\n```\n"
		resp, err := svc.Create(context.Background(), userRequest(msg, stream), messages.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ex.cmds) != 2 || ex.cmds[0] != "echo hello > a.txt && echo report" || !strings.HasPrefix(ex.cmds[1], "python3 - <<'") {
			t.Fatalf("commands = %q", ex.cmds)
		}
		var types []string
		for _, b := range resp.Content {
			types = append(types, b.Type)
		}
		if strings.Join(types, ",") != "text,server_tool_use,bash_code_execution_tool_result,text,server_tool_use,bash_code_execution_tool_result,text" {
			t.Fatalf("stream=%v blocks = %v", stream, types)
		}
		py := resp.Content[5].Result
		if py.Stdout != "HELLO\n" || py.ReturnCode != 3 {
			t.Fatalf("python result = %+v", py)
		}
		sum := resp.Content[6].Text
		for _, want := range []string{"Ran 2 code block(s)", "1. bash `echo hello > a.txt && echo report`: exit code 0", "2. python `import sys`: exit code 3", "/mnt/user-data/outputs/report.txt"} {
			if !strings.Contains(sum, want) {
				t.Fatalf("summary lacks %q:\n%s", want, sum)
			}
		}
		if resp.StopReason != wire.StopEndTurn || resp.Usage.ServerToolUse.CodeExecutionRequests != 2 {
			t.Fatalf("stop %q usage %+v", resp.StopReason, resp.Usage)
		}
	}
}

func TestNoCodeBlocks(t *testing.T) {
	resp, err := messages.New(New(), messages.Tools{}, messages.Config{}).Create(context.Background(), userRequest("hello there", false), messages.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 1 || resp.Content[0].Text != ConfigureHint {
		t.Fatalf("response = %+v", resp.Content)
	}
	for _, v := range []string{"MODEL_PROVIDER", "MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"} {
		if !strings.Contains(ConfigureHint, v) {
			t.Fatalf("hint lacks %s", v)
		}
	}
}

func TestCodeWithoutTool(t *testing.T) {
	req := userRequest("```bash\nls\n```", false)
	req.Tools = nil
	resp, err := messages.New(New(), messages.Tools{}, messages.Config{}).Create(context.Background(), req, messages.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 1 || !strings.Contains(resp.Content[0].Text, "code execution is not enabled") {
		t.Fatalf("response = %+v", resp.Content)
	}
}

func TestNotConfiguredSandbox(t *testing.T) {
	resp, err := messages.New(New(), messages.Tools{}, messages.Config{}).Create(context.Background(), userRequest("```sh\nls\n```", false), messages.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := resp.Content[len(resp.Content)-1].Text
	if !strings.Contains(last, "could not run (code_execution provider is not configured.)") {
		t.Fatalf("summary = %q", last)
	}
}
