package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"threadbox/infra/sandbox/local"
)

// sandboxToolsOpt enables every sandbox_v1 tool on a request.
var sandboxToolsOpt = option.WithJSONSet("tools", []map[string]string{{"name": "sandbox", "type": "sandbox_v1"}})

// sandboxBlock is a sandbox tool call and its result, decoded from the
// SDK's generic content blocks.
type sandboxBlock struct {
	Name    string
	Input   map[string]any
	Type    string         // the result content's type
	Content map[string]any // the result content
}

// sandboxCalls decodes the server_tool_use / sandbox_tool_result pairs of
// a response, checking that each result follows its call.
func sandboxCalls(t *testing.T, content []anthropic.ContentBlockUnion) []sandboxBlock {
	t.Helper()
	var out []sandboxBlock
	for i := 0; i < len(content); i++ {
		if content[i].Type != "server_tool_use" {
			continue
		}
		if i+1 >= len(content) || content[i+1].Type != "sandbox_tool_result" {
			t.Fatalf("block %d: a call not followed by its sandbox_tool_result: %v", i, blockTypes(content))
		}
		use := content[i].AsServerToolUse()
		var res struct {
			ToolUseID string         `json:"tool_use_id"`
			Content   map[string]any `json:"content"`
		}
		if err := json.Unmarshal([]byte(content[i+1].RawJSON()), &res); err != nil {
			t.Fatal(err)
		}
		if res.ToolUseID != use.ID || !strings.HasPrefix(use.ID, "srvtoolu_") {
			t.Fatalf("call %q, result for %q", use.ID, res.ToolUseID)
		}
		var in map[string]any
		b, _ := json.Marshal(use.Input)
		_ = json.Unmarshal(b, &in)
		typ, _ := res.Content["type"].(string)
		out = append(out, sandboxBlock{Name: string(use.Name), Input: in, Type: typ, Content: res.Content})
		i++
	}
	return out
}

// errorOf returns the error code and explanation of an error result.
func (b sandboxBlock) errorOf(t *testing.T) (string, string) {
	t.Helper()
	if b.Type != "sandbox_tool_result_error" {
		t.Fatalf("%s: not an error: %v", b.Name, b.Content)
	}
	d, _ := b.Content["detail"].(map[string]any)
	code, _ := b.Content["error_code"].(string)
	expl, _ := d["explanation"].(string)
	return code, expl
}

func (b sandboxBlock) str(key string) string {
	s, _ := b.Content[key].(string)
	return s
}

func (b sandboxBlock) num(key string) float64 {
	f, _ := b.Content[key].(float64)
	return f
}

// sandboxTurn runs one turn in container and returns its sandbox calls.
func sandboxTurn(t *testing.T, cl anthropic.Client, container string) ([]sandboxBlock, *anthropic.Message) {
	t.Helper()
	msg, err := cl.Messages.New(context.Background(), msgParams(container, userText("go")), sandboxToolsOpt)
	if err != nil {
		t.Fatal(err)
	}
	return sandboxCalls(t, msg.Content), msg
}

// TestSandboxToolsAPI drives the sandbox_v1 tools through the
// Messages API with the official SDK, the scripted fake upstream as the
// model and Docker sandboxes.
func TestSandboxToolsAPI(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	const box = "tools1"

	t.Run("sandbox_bash", func(t *testing.T) {
		fake.Push(steps(
			call("sandbox_bash", map[string]any{"command": "echo out; echo err >&2; mkdir -p sub; echo data > sub/made.txt; pwd; exit 4", "description": "make a file"}),
			call("sandbox_bash", map[string]any{"command": "pwd", "cwd": "sub"}),
			call("sandbox_bash", map[string]any{"command": "echo start; sleep 5", "timeout_seconds": 1}),
			call("sandbox_bash", map[string]any{"command": "true", "timeout_seconds": 0}),
			call("sandbox_bash", map[string]any{"command": "true", "timeout_seconds": 3601}),
			call("sandbox_bash", map[string]any{"description": "no command"}),
			call("sandbox_bash", map[string]any{"command": "head -c 1100000 /dev/zero | tr '\\0' x"}),
		), textStep("done"))
		calls, msg := sandboxTurn(t, cl, box)
		if len(calls) != 7 {
			t.Fatalf("%d calls", len(calls))
		}
		c := calls[0]
		if c.Type != "sandbox_bash_result" || c.str("stdout") != "out\n/home/agent/workspace\n" || c.str("stderr") != "err\n" || c.num("exit_code") != 4 || c.Content["truncated"] != false || c.str("description") != "make a file" {
			t.Fatalf("first call %v", c.Content)
		}
		files, _ := c.Content["files"].([]any)
		if c.num("file_count") != 1 || len(files) != 1 {
			t.Fatalf("files %v", c.Content)
		}
		f := files[0].(map[string]any)
		id := base64.RawURLEncoding.EncodeToString([]byte("/home/agent/workspace/sub/made.txt"))
		if f["path"] != "/home/agent/workspace/sub/made.txt" || f["file_id"] != id || f["size_bytes"] != 5.0 {
			t.Fatalf("file %v", f)
		}
		lp, _ := c.Content["local_paths"].(map[string]any)
		link := "/api/gpt/v1/files/" + id + "/content?scope_id=" + box
		if lp["/home/agent/workspace/sub/made.txt"] != link {
			t.Fatalf("local_paths %v", lp)
		}
		// The link works as it stands.
		if r := s.do("GET", link, tok, nil); r.status != 200 || string(r.body) != "data\n" {
			t.Fatalf("following local_paths: %d %q", r.status, r.body)
		}
		if calls[1].str("stdout") != "/home/agent/workspace/sub\n" || calls[1].num("file_count") != 0 {
			t.Fatalf("cwd call %v", calls[1].Content)
		}
		if to := calls[2]; to.num("exit_code") != 124 || to.str("stdout") != "start\n" || to.str("stderr") != "Command timed out after 1s." {
			t.Fatalf("timeout call %v", to.Content)
		}
		for _, i := range []int{3, 4, 5} {
			if code, expl := calls[i].errorOf(t); code != "invalid_tool_input" || expl == "" {
				t.Fatalf("call %d: %s %q", i, code, expl)
			}
		}
		if big := calls[6]; big.Content["truncated"] != true || !strings.HasSuffix(big.str("stdout"), "...[truncated]") || len(big.str("stdout")) != 1<<20+len("...[truncated]") {
			t.Fatalf("big output: truncated %v, %d bytes", big.Content["truncated"], len(big.str("stdout")))
		}
		if n := codeExecRequests(t, msg); n != 7 || msg.Container.ID != box {
			t.Fatalf("requests %d container %+v", n, msg.Container)
		}
		// The model saw the six tools by name.
		first := lastUpstream(t, fake, 2)
		for _, name := range []string{"sandbox_bash", "repl_execute", "exec_command", "write_stdin", "edit_file", "bsl_check"} {
			if !strings.Contains(first, `"name":"`+name+`"`) {
				t.Fatalf("upstream request lacks %s", name)
			}
		}
	})

	t.Run("repl_execute keeps state, restarts clean", func(t *testing.T) {
		repl := func(input map[string]any) sandboxBlock {
			t.Helper()
			fake.Push(steps(call("repl_execute", input)), textStep("ok"))
			calls, _ := sandboxTurn(t, cl, box)
			if len(calls) != 1 {
				t.Fatalf("%d calls", len(calls))
			}
			return calls[0]
		}
		r := repl(map[string]any{"code": "x = 40\nprint('set')"})
		if r.Type != "repl_execute_result" || r.str("stdout") != "set\n" || r.Content["value"] != nil || r.Content["error"] != nil {
			t.Fatalf("first %v", r.Content)
		}
		if r = repl(map[string]any{"code": "x += 1\ndata = 'a\\nneedle here\\nb\\nneedle again'\nx"}); r.str("value") != "41" {
			t.Fatalf("second %v", r.Content)
		}
		r = repl(map[string]any{"code": "print(x + 1)\nprint(grep('needle', data))\nprint(chunk_indices(10, 4, 1))\nprint(peek(data, 2, 6))\nFINAL(x * 2)"})
		want := "42\n[(2, 'needle here'), (4, 'needle again')]\n[(0, 4), (3, 7), (6, 10)]\nneedle\n"
		if r.str("stdout") != want || r.str("final") != "82" || r.Content["restarted"] != false {
			t.Fatalf("third %v", r.Content)
		}
		// The code's stdin is empty: input() cannot swallow the next request.
		if r = repl(map[string]any{"code": "input()"}); !strings.Contains(r.str("error"), "EOFError") {
			t.Fatalf("input() %v", r.Content)
		}
		if r = repl(map[string]any{"code": "1/0"}); !strings.Contains(r.str("error"), "ZeroDivisionError") {
			t.Fatalf("exception %v", r.Content)
		}
		if r = repl(map[string]any{"code": "x", "restart": true}); r.Content["restarted"] != true || !strings.Contains(r.str("error"), "NameError") {
			t.Fatalf("after restart %v", r.Content)
		}
		if r = repl(map[string]any{"code": "y = 1\nimport os\nos._exit(3)"}); true {
			if code, expl := r.errorOf(t); code != "unavailable" || !strings.Contains(expl, "REPL ended") {
				t.Fatalf("crash %s %q", code, expl)
			}
		}
		if r = repl(map[string]any{"code": "'y' in globals()"}); r.str("value") != "False" || r.Content["restarted"] != true {
			t.Fatalf("after crash %v", r.Content)
		}
		if r = repl(map[string]any{"code": "import time\ntime.sleep(5)", "timeout_seconds": 1}); true {
			if code, _ := r.errorOf(t); code != "execution_time_exceeded" {
				t.Fatalf("timeout %v", r.Content)
			}
		}
		if code, _ := repl(map[string]any{}).errorOf(t); code != "invalid_tool_input" {
			t.Fatal("repl without code accepted")
		}
	})

	t.Run("exec_command and write_stdin", func(t *testing.T) {
		fake.Push(steps(
			call("exec_command", map[string]any{"command": "echo quick; stty size; exit 3", "rows": 30, "cols": 100}),
			call("exec_command", map[string]any{"command": "python3 -i -q", "grace_seconds": 1}),
		), textStep("ok"))
		calls, _ := sandboxTurn(t, cl, box)
		q := calls[0]
		if q.Type != "exec_command_result" || q.Content["alive"] != false || q.num("exit_code") != 3 || q.str("status") != "exited" ||
			!strings.Contains(q.str("stdout"), "quick") || !strings.Contains(q.str("stdout"), "30 100") || q.str("session_id") != "" {
			t.Fatalf("quick command %v", q.Content)
		}
		py := calls[1]
		sid := py.str("session_id")
		if py.Content["alive"] != true || py.str("status") != "running" || py.Content["exit_code"] != nil || py.num("pid") <= 0 || !strings.HasPrefix(sid, "sess_") || !strings.Contains(py.str("stdout"), ">>>") {
			t.Fatalf("python session %v", py.Content)
		}
		cursor := py.num("cursor")
		if cursor != float64(len(py.str("stdout"))) {
			t.Fatalf("cursor %v for %d bytes", cursor, len(py.str("stdout")))
		}
		write := func(input string, since float64) sandboxBlock {
			t.Helper()
			fake.Push(steps(call("write_stdin", map[string]any{"session_id": sid, "input": input, "since": since, "wait_seconds": 5})), textStep("ok"))
			calls, _ := sandboxTurn(t, cl, box)
			return calls[0]
		}
		r := write("x = 6 * 7\n", cursor)
		if r.Type != "write_stdin_result" || strings.Contains(r.str("stdout"), "Python") || r.Content["alive"] != true {
			t.Fatalf("first write %v", r.Content)
		}
		cursor = r.num("cursor")
		r = write("print(x)\n", cursor)
		if !strings.Contains(r.str("stdout"), "42") || strings.Contains(r.str("stdout"), "6 * 7") {
			t.Fatalf("second write (only output after the cursor) %q", r.str("stdout"))
		}
		// Reading again from the older cursor returns both answers.
		if again := write("", cursor-1); !strings.Contains(again.str("stdout"), "42") {
			t.Fatalf("re-read %v", again.Content)
		}
		r = write("exit()\n", r.num("cursor"))
		if r.Content["alive"] != false || r.num("exit_code") != 0 || r.str("status") != "exited" {
			t.Fatalf("exit %v", r.Content)
		}
		if code, expl := write("x\n", 0).errorOf(t); code != "invalid_tool_input" || !strings.Contains(expl, sid) {
			t.Fatalf("write to an ended session: %s %q", code, expl)
		}
	})

	t.Run("a session printing forever stays within its buffer", func(t *testing.T) {
		fake.Push(steps(call("exec_command", map[string]any{"command": "yes 0123456789abcdef", "grace_seconds": 0.5})), textStep("ok"))
		calls, _ := sandboxTurn(t, cl, box)
		sid := calls[0].str("session_id")
		if sid == "" {
			t.Fatalf("yes ended: %v", calls[0].Content["status"])
		}
		time.Sleep(3 * time.Second)
		fake.Push(steps(call("write_stdin", map[string]any{"session_id": sid, "input": "", "since": 0, "wait_seconds": 0})), textStep("ok"))
		calls, _ = sandboxTurn(t, cl, box)
		r := calls[0]
		const bound = 1 << 20
		if len(r.str("stdout")) > bound || r.num("cursor") <= bound || r.num("dropped_bytes") <= 0 || r.Content["alive"] != true {
			t.Fatalf("stdout %d bytes, cursor %v, dropped %v, alive %v", len(r.str("stdout")), r.num("cursor"), r.num("dropped_bytes"), r.Content["alive"])
		}
		if r.num("dropped_bytes")+float64(len(r.str("stdout"))) != r.num("cursor") {
			t.Fatalf("dropped %v + kept %d != cursor %v", r.num("dropped_bytes"), len(r.str("stdout")), r.num("cursor"))
		}
		fake.Push(steps(call("write_stdin", map[string]any{"session_id": sid, "input": "\u0003", "wait_seconds": 5})), textStep("ok"))
		calls, _ = sandboxTurn(t, cl, box)
		if calls[0].Content["alive"] != false {
			t.Fatalf("Ctrl-C did not end yes: %v", calls[0].Content["status"])
		}
	})

	t.Run("edit_file", func(t *testing.T) {
		src := "def total(items):\n    s = 0\n    for i in items:\n        s += i\n    return s\n\n\ndef label(n):\n    return 'n=' + str(n)\n\nprint(total([4]))\nprint(total([3]))\n"
		fake.Push(steps(
			call("text_editor_code_execution", map[string]any{"command": "create", "path": "calc.py", "file_text": src}),
		), textStep("ok"))
		if _, err := cl.Messages.New(context.Background(), msgParams(box, userText("create"), codeExecTool...)); err != nil {
			t.Fatal(err)
		}
		fake.Push(steps(
			call("edit_file", map[string]any{"path": "calc.py", "old_str": "    return 'n=' + str(n)", "new_str": "    return f'n={n}'"}),
			call("edit_file", map[string]any{"path": "/home/agent/workspace/calc.py", "old_str": "for i in items:\n  s += i", "new_str": "for i in items:\n        s += 2 * i"}),
			call("edit_file", map[string]any{"path": "calc.py", "old_str": "def total(itemz):\n    s = 0", "new_str": "def total(items):\n    s = 100"}),
			call("edit_file", map[string]any{"path": "calc.py", "old_str": "print(total([7]))", "new_str": "print('x')"}),
			call("edit_file", map[string]any{"path": "calc.py", "old_str": "print(total(", "new_str": "print(("}),
			call("edit_file", map[string]any{"path": "missing.py", "old_str": "a", "new_str": "b"}),
			call("edit_file", map[string]any{"path": "/mnt/user-data/uploads/x.py", "old_str": "a", "new_str": "b"}),
			call("edit_file", map[string]any{"path": "calc.py", "old_str": "nothing like this at all in the file", "new_str": "b"}),
			call("sandbox_bash", map[string]any{"command": "python3 calc.py; grep -c \"n={n}\" calc.py"}),
		), textStep("ok"))
		calls, _ := sandboxTurn(t, cl, box)
		if len(calls) != 9 {
			t.Fatalf("%d calls", len(calls))
		}
		kinds := []string{"exact", "whitespace", "near"}
		for i, k := range kinds {
			c := calls[i]
			if c.Type != "edit_file_result" || c.str("match") != k || c.str("path") != "/home/agent/workspace/calc.py" {
				t.Fatalf("edit %d: %v", i, c.Content)
			}
		}
		if calls[2].num("similarity") >= 1 || calls[2].num("similarity") < 0.85 || calls[2].str("replaced") != "def total(items):\n    s = 0" {
			t.Fatalf("near match %v", calls[2].Content)
		}
		// print(total([7])) is as near to [4] as to [3]: refused as ambiguous.
		for i, want := range map[int]string{3: "matches 2 places (near match)", 4: "matches 2 places (exact match)", 5: "File not found", 6: "read-only mount", 7: "was not found"} {
			code, expl := calls[i].errorOf(t)
			if !strings.Contains(expl, want) {
				t.Fatalf("edit %d: %s %q, want %q", i, code, expl, want)
			}
		}
		if out := calls[8].str("stdout"); out != "108\n106\n1\n" {
			t.Fatalf("after edits: %q (%v)", out, calls[8].Content)
		}
	})

	t.Run("bsl_check without bsl-language-server", func(t *testing.T) {
		fake.Push(steps(
			call("sandbox_bash", map[string]any{"command": "echo 'Процедура Тест() КонецПроцедуры' > Module.bsl"}),
			call("bsl_check", map[string]any{"path": "Module.bsl"}),
			call("bsl_check", map[string]any{"path": "/etc/passwd"}),
		), textStep("ok"))
		calls, _ := sandboxTurn(t, cl, box)
		code, expl := calls[1].errorOf(t)
		if code != "unavailable" || !strings.Contains(expl, "bsl-language-server is not installed") || !strings.Contains(expl, "docs/sandbox-tools.md") {
			t.Fatalf("bsl_check: %s %q", code, expl)
		}
		if _, expl := calls[2].errorOf(t); !strings.Contains(expl, "does not match any session mount") {
			t.Fatalf("outside path: %q", expl)
		}
	})

	t.Run("streaming", func(t *testing.T) {
		fake.Push(steps(call("sandbox_bash", map[string]any{"command": "echo -n $ANTHROPIC_AUTH_TOKEN > stream-tok; echo streamed"})), textStep("fin"))
		stream := cl.Messages.NewStreaming(context.Background(), msgParams(box, userText("go")), sandboxToolsOpt)
		var acc anthropic.Message
		var startResult string
		for stream.Next() {
			ev := stream.Current()
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == "content_block_start" && ev.ContentBlock.Type == "sandbox_tool_result" {
				startResult = ev.ContentBlock.RawJSON()
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(startResult, `"stdout":"streamed\n"`) {
			t.Fatalf("result block start %s", startResult)
		}
		calls := sandboxCalls(t, acc.Content)
		if len(calls) != 1 || calls[0].str("stdout") != "streamed\n" || acc.Content[len(acc.Content)-1].AsText().Text != "fin" {
			t.Fatalf("accumulated %v", blockTypes(acc.Content))
		}
		// The streamed turn's token ended with it.
		fake.Push(steps(call("sandbox_bash", map[string]any{"command": `curl -sS -m 10 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat stream-tok)" "$ANTHROPIC_BASE_URL/v1/files?scope_id=` + box + `"`})), textStep("ok"))
		if after, _ := sandboxTurn(t, cl, box); after[0].str("stdout") != "401" {
			t.Fatalf("the streamed turn's token after the turn: %q", after[0].str("stdout"))
		}
	})

	t.Run("the product API from inside the sandbox", func(t *testing.T) {
		curl := `curl -sS -m 20 -o resp.json -w '%{http_code}' -H "Authorization: Bearer ${TOK:-$ANTHROPIC_AUTH_TOKEN}" -H 'content-type: application/json' ` +
			`-d "{\"model\":\"$ANTHROPIC_MODEL\",\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"inner question\"}]}" "$ANTHROPIC_BASE_URL/v1/messages"; echo; cat resp.json`
		fake.Push(
			steps(call("sandbox_bash", map[string]any{"command": "echo $ANTHROPIC_BASE_URL $ANTHROPIC_MODEL; echo -n $ANTHROPIC_AUTH_TOKEN > /home/agent/workspace/tok; echo hi > /mnt/user-data/outputs/inside.txt; " + curl})),
			textStep("inner answer"), // the request made from inside the sandbox
			steps(call("sandbox_bash", map[string]any{"command": `curl -sS -m 10 -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" "$ANTHROPIC_BASE_URL/v1/files?scope_id=` + box + `&limit=1000" | grep -o 'inside.txt' | head -1; ` +
				`curl -sS -m 10 -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:47800/healthz"; ` +
				`curl -sS -m 10 -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" "http://127.0.0.1:47800/api/v1/app/me"; ` +
				`curl -sS -m 10 -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer ` + tok + `" "$ANTHROPIC_BASE_URL/v1/files?scope_id=` + box + `"`})),
			textStep("outer done"),
		)
		calls, msg := sandboxTurn(t, cl, box)
		out := calls[0].str("stdout")
		lines := strings.SplitN(out, "\n", 3)
		if len(lines) < 3 || lines[0] != "http://127.0.0.1:47800/api/gpt fake-model" || lines[1] != "200" || !strings.Contains(lines[2], "inner answer") {
			t.Fatalf("curl from inside: %q (stderr %q)", out, calls[0].str("stderr"))
		}
		inner := lastUpstream(t, fake, 3)
		if !strings.Contains(inner, "inner question") {
			t.Fatalf("the upstream did not see the inner request: %s", inner)
		}
		// As the requesting user: that user's container files are listed;
		// nothing but /api/gpt/ is served; the user's own API token is not
		// accepted from inside.
		if got := calls[1].str("stdout"); got != "inside.txt\n404\n404\n403\n" {
			t.Fatalf("second call %q (stderr %q)", got, calls[1].str("stderr"))
		}
		if msg.Content[len(msg.Content)-1].AsText().Text != "outer done" {
			t.Fatalf("content %v", blockTypes(msg.Content))
		}

		// After the turn the token is refused, from inside and outside.
		fake.Push(steps(call("sandbox_bash", map[string]any{"command": "TOK=$(cat tok) ; " + curl})), textStep("after"))
		calls, _ = sandboxTurn(t, cl, box)
		if got := calls[0].str("stdout"); !strings.HasPrefix(got, "401\n") || !strings.Contains(got, "authentication_error") {
			t.Fatalf("revoked token from inside: %q", got)
		}
	})

	t.Run("llm_query from the REPL", func(t *testing.T) {
		fake.Push(
			steps(call("repl_execute", map[string]any{"code": "answer = llm_query('what is 2+2?', max_tokens=50)\nFINAL(answer)"})),
			textStep("four"), // the REPL's request
			textStep("done"),
		)
		calls, _ := sandboxTurn(t, cl, box)
		if r := calls[0]; r.str("final") != "four" || r.Content["error"] != nil {
			t.Fatalf("llm_query %v", r.Content)
		}
		inner := lastUpstream(t, fake, 2)
		if !strings.Contains(inner, "what is 2+2?") || !strings.Contains(inner, `"model":"fake-model"`) {
			t.Fatalf("the upstream saw %s", inner)
		}
	})

	t.Run("a token from another container is refused; nothing else is reachable", func(t *testing.T) {
		// Turn A (in tools1) keeps its token alive while its command waits and
		// leaves the token in an output file; turn B (another container)
		// tries it.
		fake.Push(steps(call("sandbox_bash", map[string]any{"command": "echo -n $ANTHROPIC_AUTH_TOKEN > /mnt/user-data/outputs/live-token; for i in $(seq 600); do [ -f /mnt/user-data/uploads/release ] && break; sleep 0.1; done"})))
		var wg sync.WaitGroup
		var errA error
		wg.Go(func() {
			_, errA = cl.Messages.New(context.Background(), msgParams(box, userText("hold")), sandboxToolsOpt)
		})
		id := base64.RawURLEncoding.EncodeToString([]byte("/mnt/user-data/outputs/live-token"))
		var live string
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			req, _ := http.NewRequest("GET", s.base+"/api/gpt/v1/files/"+id+"/content?scope_id="+box, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && len(b) > 20 {
				live = string(b)
				break
			}
		}
		if live == "" {
			t.Fatal("turn A never wrote its token")
		}
		// A live sandbox token that leaked (here through an output file) is
		// refused outside its sandbox.
		if r := s.do("GET", "/api/gpt/v1/files?scope_id="+box, live, nil); r.status != 403 || !strings.Contains(string(r.body), "only from inside their sandbox") {
			t.Fatalf("a live sandbox token from outside: %d %s", r.status, r.body)
		}
		fake.Push(steps(call("sandbox_bash", map[string]any{"command": `curl -sS -m 10 -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer ` + live + `" "$ANTHROPIC_BASE_URL/v1/files?scope_id=` + box + `"; ` +
			// Through the egress proxy (off for this org) the proxy refuses;
			// without it there is no route at all. 192.0.2.1 is a
			// documentation address that no network routes.
			`curl -fsS -m 5 -o /dev/null http://192.0.2.1/ || echo refused-internet; ` +
			`curl -sS -m 5 --noproxy '*' -o /dev/null http://192.0.2.1/ || echo unreachable-internet; ` +
			`curl -fsS -m 5 -o /dev/null http://172.17.0.1:2375/ || echo refused-host; ` +
			`curl -sS -m 5 --noproxy '*' -o /dev/null http://172.17.0.1:2375/ || echo unreachable-host; ` +
			`curl -sS -m 5 -o /dev/null http://127.0.0.1:47801/ || echo unreachable-port`})), textStep("B done"), textStep("A done"))
		calls, _ := sandboxTurn(t, cl, "tools2")
		if got := calls[0].str("stdout"); got != "403\nrefused-internet\nunreachable-internet\nrefused-host\nunreachable-host\nunreachable-port\n" {
			t.Fatalf("from another container: %q (stderr %q)", got, calls[0].str("stderr"))
		}
		// Let turn A end: its command waits for this upload.
		req, _ := http.NewRequest("PUT", s.base+"/api/gpt/v1/files/release?scope_id="+box, strings.NewReader("go"))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("release upload: %d", resp.StatusCode)
		}
		wg.Wait()
		if errA != nil {
			t.Fatal(errA)
		}
	})
}

// TestSandboxAllowedServices exposes a host HTTP service inside the
// sandbox through SANDBOX_ALLOW_SERVICES.
func TestSandboxAllowedServices(t *testing.T) {
	bin := needDocker(t)
	svc := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "internal says hi to "+r.URL.Path)
	})}
	addr := freeAddr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = svc.Serve(l) }()
	defer svc.Close()
	s, fake := modelServer(t, "", "anthropic", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin,
		"SANDBOX_API_PORT": "48000", "SANDBOX_ALLOW_SERVICES": "wiki=" + addr,
	})
	cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
	fake.Push(steps(call("sandbox_bash", map[string]any{"command": `echo $SANDBOX_SERVICE_WIKI $ANTHROPIC_BASE_URL; curl -sS -m 10 "http://$SANDBOX_SERVICE_WIKI/page"`})), textStep("ok"))
	calls, _ := sandboxTurn(t, cl, "svc1")
	if got := calls[0].str("stdout"); got != "127.0.0.1:48001 http://127.0.0.1:48000/api/gpt\ninternal says hi to /page" {
		t.Fatalf("service from inside: %q (stderr %q)", got, calls[0].str("stderr"))
	}
}

// TestSandboxToolsLocal runs the session tools and the API bridge in the
// local (bubblewrap) backend: its jail has its own network namespace with
// only loopback, like a Docker sandbox with network none.
func TestSandboxToolsLocal(t *testing.T) {
	bin := needDocker(t) // the agent binary; Docker itself is not used
	if _, err := exec.LookPath("bwrap"); err != nil {
		missing(t, "bubblewrap is missing: %v", err)
	}
	if local.FindRootFS(os.Getenv) == "" {
		missing(t, "no sandbox root filesystem (make sandbox-image)")
	}
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "local", "THREADBOX_AGENT_BIN": bin})
	// The container folders sit under the test's private (0700) temporary
	// folder: as root the jail binds them from its stage (local.Config.StageDir).
	cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
	fake.Push(steps(
		call("repl_execute", map[string]any{"code": "n = 5"}),
		call("repl_execute", map[string]any{"code": "n * 2"}),
		call("exec_command", map[string]any{"command": "python3 -i -q", "grace_seconds": 0.5}),
		call("sandbox_bash", map[string]any{"command": `curl -sS -m 20 -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" -H 'content-type: application/json' -d '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"`}),
	), textStep("from inside the jail"), textStep("ok"))
	calls, _ := sandboxTurn(t, cl, "local1")
	if calls[1].str("value") != "10" {
		t.Fatalf("repl state: %v / %v", calls[0].Content, calls[1].Content)
	}
	sid := calls[2].str("session_id")
	if sid == "" || calls[2].Content["alive"] != true {
		t.Fatalf("python session %v", calls[2].Content)
	}
	if out := calls[3].str("stdout"); !strings.Contains(out, "from inside the jail") {
		t.Fatalf("curl from the jail: %q (stderr %q)", out, calls[3].str("stderr"))
	}
	fake.Push(steps(call("write_stdin", map[string]any{"session_id": sid, "input": "print(6 * 7)\n", "since": calls[2].num("cursor"), "wait_seconds": 5})), textStep("ok"))
	calls, _ = sandboxTurn(t, cl, "local1")
	if !strings.Contains(calls[0].str("stdout"), "42") {
		t.Fatalf("write_stdin: %v", calls[0].Content)
	}
}
