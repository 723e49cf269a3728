package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	msgwire "threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/runner"
)

// msgClient is the official SDK pointed at the server's Messages API.
func msgClient(s *server, token string, opts ...option.RequestOption) anthropic.Client {
	base := []option.RequestOption{
		option.WithBaseURL(s.base + "/api/gpt"), option.WithAuthToken(token),
		option.WithMaxRetries(0), option.WithRequestTimeout(2 * time.Minute),
		// Every exchange is checked against the API document (harness_test.go).
		option.WithHTTPClient(&http.Client{Transport: openAPITransport{s.t, http.DefaultTransport}}),
	}
	return anthropic.NewClient(append(base, opts...)...)
}

var codeExecTool = []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}}

func userText(text string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
}

func msgParams(container string, msgs []anthropic.MessageParam, tools ...anthropic.ToolUnionParam) anthropic.MessageNewParams {
	p := anthropic.MessageNewParams{Model: "default", MaxTokens: 1024, Messages: msgs, Tools: tools}
	if container != "" {
		p.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(container)}
	}
	return p
}

// Scripted upstream replies.

func call(name string, input any) msgwire.ContentBlock {
	b, _ := json.Marshal(input)
	return msgwire.ContentBlock{Type: msgwire.BlockToolUse, ID: fmt.Sprintf("toolu_%d", time.Now().UnixNano()), Name: name, Input: b}
}

func bashStep(command string) fakeupstream.Reply {
	return fakeupstream.Reply{Content: []msgwire.ContentBlock{call(msgwire.SubToolBash, map[string]any{"command": command})}}
}

func steps(blocks ...msgwire.ContentBlock) fakeupstream.Reply {
	return fakeupstream.Reply{Content: blocks}
}

func textStep(text string) fakeupstream.Reply {
	return fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: text}}}
}

// codeExecRequests reads usage.server_tool_use.code_execution_requests
// from a message's JSON (the SDK keeps it as an extra field; an accumulated
// stream has it in the merged raw JSON).
func codeExecRequests(t *testing.T, m *anthropic.Message) int {
	t.Helper()
	var v struct {
		Usage struct {
			ServerToolUse *struct {
				CodeExecutionRequests int `json:"code_execution_requests"`
			} `json:"server_tool_use"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(m.RawJSON()), &v); err != nil || v.Usage.ServerToolUse == nil {
		t.Fatalf("usage without server_tool_use: %s", m.RawJSON())
	}
	return v.Usage.ServerToolUse.CodeExecutionRequests
}

// bashTurn runs one Messages API request of tok on s, in container, whose
// model (fake, s's upstream) calls bash with command and then answers, and
// returns the call's result.
func bashTurn(t *testing.T, s *server, fake *fakeupstream.Server, tok, container, command string) anthropic.BashCodeExecutionResultBlock {
	t.Helper()
	fake.Push(bashStep(command), textStep("ok"))
	cl := msgClient(s, tok)
	msg, err := cl.Messages.New(context.Background(), msgParams(container, userText("run"), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	_, r := bashResult(t, msg.Content, 0)
	return r
}

// bashResult checks that blocks i and i+1 are a bash call and its result
// and returns the result.
func bashResult(t *testing.T, content []anthropic.ContentBlockUnion, i int) (anthropic.ServerToolUseBlock, anthropic.BashCodeExecutionResultBlock) {
	t.Helper()
	if len(content) < i+2 || content[i].Type != "server_tool_use" || content[i+1].Type != "bash_code_execution_tool_result" {
		t.Fatalf("blocks %d-%d are not a bash call and result: %v", i, i+1, blockTypes(content))
	}
	use := content[i].AsServerToolUse()
	res := content[i+1].AsBashCodeExecutionToolResult()
	if !strings.HasPrefix(use.ID, "srvtoolu_") || use.Name != "bash_code_execution" || res.ToolUseID != use.ID {
		t.Fatalf("call %q %q, result for %q", use.ID, use.Name, res.ToolUseID)
	}
	if res.Content.Type != "bash_code_execution_result" {
		t.Fatalf("bash result is %s: %s", res.Content.Type, res.RawJSON())
	}
	return use, res.Content.AsResponseBashCodeExecutionResultBlock()
}

func editorResult(t *testing.T, content []anthropic.ContentBlockUnion, i int) anthropic.TextEditorCodeExecutionToolResultBlockContentUnion {
	t.Helper()
	if len(content) < i+2 || content[i].Type != "server_tool_use" || content[i+1].Type != "text_editor_code_execution_tool_result" {
		t.Fatalf("blocks %d-%d are not an editor call and result: %v", i, i+1, blockTypes(content))
	}
	use := content[i].AsServerToolUse()
	res := content[i+1].AsTextEditorCodeExecutionToolResult()
	if use.Name != "text_editor_code_execution" || res.ToolUseID != use.ID {
		t.Fatalf("call %q %q, result for %q", use.ID, use.Name, res.ToolUseID)
	}
	return res.Content
}

func blockTypes(content []anthropic.ContentBlockUnion) []string {
	out := make([]string, len(content))
	for i, b := range content {
		out[i] = b.Type
	}
	return out
}

// lastUpstream returns the body of the upstream request n from the end
// (1 = the last one).
func lastUpstream(t *testing.T, fake *fakeupstream.Server, n int) string {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) < n {
		t.Fatalf("only %d upstream requests", len(reqs))
	}
	return string(reqs[len(reqs)-n].Body)
}

func apiStatus(t *testing.T, err error) (int, string) {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("not an API error: %v", err)
	}
	return ae.StatusCode, ae.RawJSON()
}

// TestMessagesAPIAnthropicSDK drives the Messages API with the official
// Anthropic Go SDK against a threadbox whose model is the scripted fake
// upstream in the Anthropic format, with code running in Docker sandboxes.
func TestMessagesAPIAnthropicSDK(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MAX_TOOL_ITERATIONS": "3",
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()
	var (
		outputID    string
		firstExpiry time.Time
	)

	t.Run("bash", func(t *testing.T) {
		fake.Push(bashStep("echo hello; echo oops >&2; echo report > $OUTPUT_DIR/out.txt; exit 3"), textStep("done"))
		msg, err := cl.Messages.New(ctx, msgParams("box1", userText("run it"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		use, r := bashResult(t, msg.Content, 0)
		var in struct{ Command string }
		if b, _ := json.Marshal(use.Input); json.Unmarshal(b, &in) != nil || !strings.HasPrefix(in.Command, "echo hello") {
			t.Fatalf("input %s", use.Input)
		}
		if r.Stdout != "hello\n" || r.Stderr != "oops\n" || r.ReturnCode != 3 {
			t.Fatalf("result %+v", r)
		}
		if len(r.Content) != 1 {
			t.Fatalf("output files %v", r.Content)
		}
		outputID = r.Content[0].FileID
		if p, _ := base64.RawURLEncoding.DecodeString(outputID); string(p) != "/mnt/user-data/outputs/out.txt" {
			t.Fatalf("output file id %q = %q", outputID, p)
		}
		if len(msg.Content) != 3 || msg.Content[2].AsText().Text != "done" || msg.StopReason != anthropic.StopReasonEndTurn {
			t.Fatalf("content %v stop %s", blockTypes(msg.Content), msg.StopReason)
		}
		if !strings.HasPrefix(msg.ID, "msg_") || msg.Model != "fake-model" {
			t.Fatalf("id %q model %q", msg.ID, msg.Model)
		}
		if msg.Container.ID != "box1" || !msg.Container.ExpiresAt.After(time.Now()) {
			t.Fatalf("container %+v", msg.Container)
		}
		firstExpiry = msg.Container.ExpiresAt
		if n := codeExecRequests(t, msg); n != 1 {
			t.Fatalf("code_execution_requests %d", n)
		}
		// The model saw both sub-tools with schemas, then the result.
		first, second := lastUpstream(t, fake, 2), lastUpstream(t, fake, 1)
		for _, want := range []string{`"name":"bash_code_execution"`, `"name":"text_editor_code_execution"`, `"input_schema"`, `"model":"fake-model"`} {
			if !strings.Contains(first, want) {
				t.Fatalf("first upstream request lacks %s: %s", want, first)
			}
		}
		if !strings.Contains(second, `"tool_result"`) || !strings.Contains(second, `hello\\n`) {
			t.Fatalf("second upstream request lacks the result: %s", second)
		}
	})

	t.Run("files persist; multi-step editor loop", func(t *testing.T) {
		fake.Push(
			steps(call("text_editor_code_execution", map[string]any{"command": "create", "path": "notes.txt", "file_text": "alpha\n  \"debug\": true\ngamma\ndelta\n"})),
			steps(
				call("text_editor_code_execution", map[string]any{"command": "str_replace", "path": "/home/agent/workspace/notes.txt", "old_str": `  "debug": true`, "new_str": `  "debug": false`}),
				call("text_editor_code_execution", map[string]any{"command": "view", "path": "notes.txt", "view_range": []int{2, -1}}),
				call("text_editor_code_execution", map[string]any{"command": "create", "path": "notes.txt", "file_text": "one\ntwo\n"}),
				call("text_editor_code_execution", map[string]any{"command": "insert", "path": "notes.txt", "insert_line": 0, "insert_text": "zero"}),
				call("bash_code_execution", map[string]any{"command": "cat notes.txt; cat /mnt/user-data/outputs/out.txt"}),
				call("text_editor_code_execution", map[string]any{"command": "view", "path": "/home/agent/workspace"}),
			),
			textStep("edited"),
		)
		msg, err := cl.Messages.New(ctx, msgParams("box1", userText("edit"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if c := editorResult(t, msg.Content, 0).AsResponseTextEditorCodeExecutionCreateResultBlock(); c.Type != "text_editor_code_execution_create_result" || c.IsFileUpdate {
			t.Fatalf("create %+v", c)
		}
		sr := editorResult(t, msg.Content, 2).AsResponseTextEditorCodeExecutionStrReplaceResultBlock()
		if sr.OldStart != 2 || sr.OldLines != 1 || sr.NewStart != 2 || sr.NewLines != 1 || strings.Join(sr.Lines, "|") != `-  "debug": true|+  "debug": false` {
			t.Fatalf("str_replace %+v", sr)
		}
		v := editorResult(t, msg.Content, 4).AsResponseTextEditorCodeExecutionViewResultBlock()
		if v.FileType != "text" || v.StartLine != 2 || v.NumLines != 3 || v.TotalLines != 4 || !strings.Contains(v.Content, `"debug": false`) || strings.Contains(v.Content, "alpha") {
			t.Fatalf("view %+v", v)
		}
		if c := editorResult(t, msg.Content, 6).AsResponseTextEditorCodeExecutionCreateResultBlock(); !c.IsFileUpdate {
			t.Fatalf("second create %+v", c)
		}
		editorResult(t, msg.Content, 8)
		_, r := bashResult(t, msg.Content, 10)
		if r.Stdout != "zero\none\ntwo\nreport\n" {
			t.Fatalf("files after edits: %q", r.Stdout)
		}
		dir := editorResult(t, msg.Content, 12).AsResponseTextEditorCodeExecutionViewResultBlock()
		if !strings.Contains(dir.Content, "notes.txt") {
			t.Fatalf("directory view %+v", dir)
		}
		if n := codeExecRequests(t, msg); n != 7 || msg.StopReason != anthropic.StopReasonEndTurn || msg.Content[14].AsText().Text != "edited" {
			t.Fatalf("requests %d stop %s content %v", n, msg.StopReason, blockTypes(msg.Content))
		}
	})

	t.Run("container_upload", func(t *testing.T) {
		fake.Push(textStep("seen"))
		p := msgParams("box1", []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("look"), anthropic.NewContainerUploadBlock(outputID))}, codeExecTool...)
		msg, err := cl.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Container.ID != "box1" || !strings.Contains(lastUpstream(t, fake, 1), "/mnt/user-data/outputs/out.txt") {
			t.Fatalf("container %+v; upstream %s", msg.Container, lastUpstream(t, fake, 1))
		}
		missing := base64.RawURLEncoding.EncodeToString([]byte("/mnt/user-data/uploads/nope.csv"))
		p = msgParams("box1", []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewContainerUploadBlock(missing))}, codeExecTool...)
		_, err = cl.Messages.New(ctx, p)
		if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "invalid_request_error") || !strings.Contains(body, missing) {
			t.Fatalf("missing upload: %d %s", st, body)
		}
	})

	t.Run("streaming", func(t *testing.T) {
		fake.Push(bashStep("echo before; sleep 5; echo after"), textStep("streamed"))
		stream := cl.Messages.NewStreaming(ctx, msgParams("box1", userText("stream"), codeExecTool...))
		var (
			acc      anthropic.Message
			types    []string
			useStop  time.Time
			resultAt time.Time
			jsonSeen bool
		)
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
			switch {
			case ev.Type == "content_block_delta" && ev.Delta.Type == "input_json_delta" && ev.Index == 0:
				jsonSeen = true
			case ev.Type == "content_block_stop" && ev.Index == 0:
				useStop = time.Now()
			case ev.Type == "content_block_start" && ev.ContentBlock.Type == "bash_code_execution_tool_result":
				resultAt = time.Now()
				r := ev.ContentBlock.AsBashCodeExecutionToolResult().Content.AsResponseBashCodeExecutionResultBlock()
				if r.Stdout != "before\nafter\n" {
					t.Fatalf("result in content_block_start is not complete: %+v", r)
				}
			case ev.Type == "message_delta":
				if ev.Delta.Container.ID != "box1" || !ev.Delta.Container.ExpiresAt.After(time.Now()) {
					t.Fatalf("message_delta container %+v", ev.Delta.Container)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if types[0] != "message_start" || types[len(types)-1] != "message_stop" || !jsonSeen {
			t.Fatalf("events %v (input_json_delta seen: %v)", types, jsonSeen)
		}
		// The call was flushed when it was made, long before its result.
		if useStop.IsZero() || resultAt.Sub(useStop) < 4*time.Second {
			t.Fatalf("server_tool_use at %v, result at %v: not streamed as it happened", useStop, resultAt)
		}
		_, r := bashResult(t, acc.Content, 0)
		if r.Stdout != "before\nafter\n" || acc.Content[2].AsText().Text != "streamed" || acc.StopReason != anthropic.StopReasonEndTurn {
			t.Fatalf("accumulated %v %s", blockTypes(acc.Content), acc.StopReason)
		}
		if acc.Container.ID != "box1" || codeExecRequests(t, &acc) != 1 {
			t.Fatalf("accumulated container %+v usage %s", acc.Container, acc.Usage.RawJSON())
		}
	})

	t.Run("pings while a command runs", func(t *testing.T) {
		fake.Push(bashStep("sleep 5"), textStep("ok"))
		body := `{"model":"default","max_tokens":100,"stream":true,"container":"box1","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"wait"}]}`
		r := s.do("POST", "/api/gpt/v1/messages", tok, body)
		evs := strings.Split(string(r.body), "\n\n")
		seenUse, pings := false, 0
		for _, e := range evs {
			switch {
			case strings.Contains(e, `"server_tool_use"`):
				seenUse = true
			case strings.Contains(e, "bash_code_execution_tool_result"):
				seenUse = false
			case seenUse && strings.HasPrefix(e, "event: ping"):
				pings++
			}
		}
		if r.status != 200 || pings < 1 {
			t.Fatalf("%d: %d pings while the command ran: %s", r.status, pings, r.body)
		}
	})

	t.Run("client tools", func(t *testing.T) {
		weather := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}
		tools := append(append([]anthropic.ToolUnionParam{}, codeExecTool...), weather)

		// A client tool alone.
		fake.Push(steps(call("get_weather", map[string]any{"city": "Paris"})), textStep("sunny in Paris"))
		msgs := userText("weather?")
		msg, err := cl.Messages.New(ctx, msgParams("box1", msgs, tools...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Content[0].Name != "get_weather" {
			t.Fatalf("stop %s content %v", msg.StopReason, blockTypes(msg.Content))
		}
		msgs = append(msgs, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[0].ID, "sunny", false)))
		msg, err = cl.Messages.New(ctx, msgParams("box1", msgs, tools...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != anthropic.StopReasonEndTurn || !strings.Contains(lastUpstream(t, fake, 1), `"sunny"`) {
			t.Fatalf("continued: %s %v", msg.StopReason, blockTypes(msg.Content))
		}

		// A client tool beside a server call: the call runs with the next request.
		fake.Push(steps(call("bash_code_execution", map[string]any{"command": "echo mixed"}), call("get_weather", map[string]any{"city": "Oslo"})), textStep("both done"))
		msgs = userText("both")
		msg, err = cl.Messages.New(ctx, msgParams("box1", msgs, tools...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != anthropic.StopReasonToolUse || strings.Join(blockTypes(msg.Content), ",") != "server_tool_use,tool_use" || codeExecRequests(t, msg) != 0 {
			t.Fatalf("mixed: %s %v %s", msg.StopReason, blockTypes(msg.Content), msg.Usage.RawJSON())
		}
		srv := msg.Content[0].ID
		msgs = append(msgs, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[1].ID, "cold", false)))
		msg, err = cl.Messages.New(ctx, msgParams("box1", msgs, tools...))
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 2 || msg.Content[0].Type != "bash_code_execution_tool_result" || msg.Content[0].AsBashCodeExecutionToolResult().ToolUseID != srv {
			t.Fatalf("pending call's result: %v", blockTypes(msg.Content))
		}
		if r := msg.Content[0].AsBashCodeExecutionToolResult().Content.AsResponseBashCodeExecutionResultBlock(); r.Stdout != "mixed\n" || msg.StopReason != anthropic.StopReasonEndTurn {
			t.Fatalf("pending call ran: %+v %s", r, msg.StopReason)
		}
	})

	t.Run("pause_turn and continuation", func(t *testing.T) {
		fake.Push(bashStep("echo 1"), bashStep("echo 2"), bashStep("echo 3"), textStep("finished"))
		msgs := userText("long job")
		msg, err := cl.Messages.New(ctx, msgParams("box1", msgs, codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if !msg.Container.ExpiresAt.After(firstExpiry) {
			t.Fatalf("expires_at did not roll forward: %v, first %v", msg.Container.ExpiresAt, firstExpiry)
		}
		if msg.StopReason != anthropic.StopReasonPauseTurn || len(msg.Content) != 6 || codeExecRequests(t, msg) != 3 {
			t.Fatalf("paused: %s %v %s", msg.StopReason, blockTypes(msg.Content), msg.Usage.RawJSON())
		}
		for i := 0; i < 6; i += 2 {
			if _, r := bashResult(t, msg.Content, i); r.Stdout != fmt.Sprintf("%d\n", i/2+1) {
				t.Fatalf("step %d: %q", i/2, r.Stdout)
			}
		}
		msgs = append(msgs, msg.ToParam())
		msg, err = cl.Messages.New(ctx, msgParams("box1", msgs, codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != anthropic.StopReasonEndTurn || msg.Content[0].AsText().Text != "finished" {
			t.Fatalf("continued: %s %v", msg.StopReason, blockTypes(msg.Content))
		}
		up := lastUpstream(t, fake, 1)
		if strings.Count(up, `"tool_result"`) != 3 || strings.Contains(up, "server_tool_use") {
			t.Fatalf("continuation history sent upstream: %s", up)
		}
	})

	t.Run("error strings", func(t *testing.T) {
		errSteps := func() fakeupstream.Reply {
			return steps(
				call("bash_code_execution", map[string]any{"command": "sleep 5", "timeout": 1}),
				call("bash_code_execution", map[string]any{"command": "head -c 1100000 /dev/zero | tr '\\0' a"}),
				call("text_editor_code_execution", map[string]any{"command": "view", "path": "missing.txt"}),
				call("text_editor_code_execution", map[string]any{"command": "create", "path": "/mnt/user-data/uploads/x.txt", "file_text": "x"}),
				call("text_editor_code_execution", map[string]any{"command": "view", "path": "/etc/passwd"}),
				call("text_editor_code_execution", map[string]any{"command": "create", "path": "err.txt", "file_text": "present\n"}),
				call("text_editor_code_execution", map[string]any{"command": "str_replace", "path": "err.txt", "old_str": "absent", "new_str": "y"}),
			)
		}
		// Through the SDK with the Anthropic tool type: typed, no detail.
		fake.Push(errSteps(), textStep("errors"))
		msg, err := cl.Messages.New(ctx, msgParams("box1", userText("break things"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if _, r := bashResult(t, msg.Content, 0); r.ReturnCode != 124 || r.Stderr != "Command timed out after 1s." {
			t.Errorf("timeout: return code %d, stderr %q", r.ReturnCode, r.Stderr)
		}
		if _, r := bashResult(t, msg.Content, 2); !strings.HasSuffix(r.Stdout, "...[truncated]") || len(r.Stdout) > 1<<20+64 {
			t.Fatalf("truncation: %d bytes, ends %q", len(r.Stdout), r.Stdout[max(0, len(r.Stdout)-20):])
		}
		for _, i := range []int{4, 6, 8, 12} {
			e := editorResult(t, msg.Content, i)
			if e.Type != "text_editor_code_execution_tool_result_error" || e.ErrorCode == "" || strings.Contains(msg.Content[i+1].RawJSON(), "detail") {
				t.Fatalf("block %d: %s", i+1, msg.Content[i+1].RawJSON())
			}
		}

		// The product's own tool type carries the detail with the exact strings.
		fake.Push(errSteps(), textStep("errors"))
		body := `{"model":"default","max_tokens":100,"container":"box1","tools":[{"type":"code_execution_v1","name":"code_execution"}],"messages":[{"role":"user","content":"break"}]}`
		r := s.do("POST", "/api/gpt/v1/messages", tok, body)
		var resp msgwire.Response
		if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		want := map[int]string{
			5:  "File not found: /home/agent/workspace/missing.txt",
			7:  "Path '/mnt/user-data/uploads/x.txt' is in a read-only mount",
			9:  "Path '/etc/passwd' does not match any session mount",
			13: "",
		}
		for i, expl := range want {
			res := resp.Content[i].Result
			if res == nil || !res.IsError() || res.Detail == nil || res.Detail.Code != res.ErrorCode {
				t.Fatalf("block %d: %+v", i, resp.Content[i])
			}
			if expl != "" && res.Detail.Explanation != expl {
				t.Fatalf("block %d explanation %q, want %q", i, res.Detail.Explanation, expl)
			}
			if expl == "" && !strings.Contains(res.Detail.Explanation, "old_str") {
				t.Fatalf("str_replace miss: %q", res.Detail.Explanation)
			}
		}
	})

	t.Run("skills", func(t *testing.T) {
		arch := wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("pdf-helper", "Helps with PDFs")})
		if r := s.do("POST", "/api/v1/app/skills", tok, arch, "Content-Type", "application/zip"); r.status != 201 {
			t.Fatalf("upload skill: %d %s", r.status, r.body)
		}
		fake.Push(bashStep("cat /mnt/skills/pdf-helper/SKILL.md"), textStep("read"))
		p := msgParams("", userText("use the skill"), codeExecTool...)
		p.Container = anthropic.MessageCreateParamsContainerUnion{OfContainers: &anthropic.ContainerParams{
			ID: anthropic.String("box1"), Skills: []anthropic.SkillParams{{Type: "custom", SkillID: "pdf-helper", Version: anthropic.String("latest")}},
		}}
		msg, err := cl.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, r := bashResult(t, msg.Content, 0); !strings.Contains(r.Stdout, "name: pdf-helper") {
			t.Fatalf("skill not loaded: %+v", r)
		}
		if !strings.Contains(lastUpstream(t, fake, 2), "pdf-helper: Helps with PDFs") {
			t.Fatalf("the model was not told of the skill: %s", lastUpstream(t, fake, 2))
		}
		// A later request in the same container that asks for no skill
		// sees none.
		fake.Push(bashStep("ls -A /mnt/skills; echo end"), textStep("listed"))
		later, err := cl.Messages.New(ctx, msgParams("box1", userText("list skills"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if _, r := bashResult(t, later.Content, 0); r.Stdout != "end\n" {
			t.Fatalf("skills left for a request that did not ask for them: %q", r.Stdout)
		}
		p.Container.OfContainers.Skills[0].SkillID = "no-such-skill"
		_, err = cl.Messages.New(ctx, p)
		if st, body := apiStatus(t, err); st != 404 || !strings.Contains(body, "no-such-skill") {
			t.Fatalf("unknown skill: %d %s", st, body)
		}
		// validate finds skills as the request does: type and version too.
		validate := func(skills string) response {
			return s.do("POST", "/api/gpt/v1/messages/validate", tok, `{"model":"x","max_tokens":10,"container":{"id":"box1","skills":`+skills+`},"messages":[{"role":"user","content":"hi"}]}`)
		}
		if r := validate(`[{"type":"custom","skill_id":"pdf-helper","version":"1"}]`); r.status != 200 || !strings.Contains(string(r.body), `"skills":["pdf-helper"]`) {
			t.Fatalf("validate of a skill version: %d %s", r.status, r.body)
		}
		if r := validate(`[{"type":"custom","skill_id":"pdf-helper","version":"99"}]`); r.status != 404 {
			t.Fatalf("validate of a missing skill version: %d %s", r.status, r.body)
		}
		if r := validate(`[{"type":"bogus","skill_id":"pdf-helper"}]`); r.status != 400 || !strings.Contains(string(r.body), "bogus") {
			t.Fatalf("validate of a skill type: %d %s", r.status, r.body)
		}
		// An Anthropic skill is one the org uploaded under that name, or a
		// clear 404.
		if r := validate(`[{"type":"anthropic","skill_id":"pdf-helper"}]`); r.status != 200 {
			t.Fatalf("validate of an anthropic skill the org has: %d %s", r.status, r.body)
		}
		if r := validate(`[{"type":"anthropic","skill_id":"xlsx"}]`); r.status != 404 || !strings.Contains(string(r.body), "pre-built skills are not on this server") {
			t.Fatalf("validate of an anthropic skill the org lacks: %d %s", r.status, r.body)
		}
	})

	t.Run("default container and namespacing", func(t *testing.T) {
		fake.Push(bashStep("echo mine > /home/agent/workspace/who.txt; cat who.txt"), textStep("ok"))
		msg, err := cl.Messages.New(ctx, msgParams("", userText("default"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.Container.ID != "default" {
			t.Fatalf("default container reported as %+v", msg.Container)
		}
		// Another user's "box1" is another container: notes.txt is not there.
		other := s.bootstrap("other-org", "admin@other.test")
		fake.Push(steps(call("text_editor_code_execution", map[string]any{"command": "view", "path": "notes.txt"})), textStep("ok"))
		otherClient := msgClient(s, other)
		msg, err = otherClient.Messages.New(ctx, msgParams("box1", userText("peek"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if e := editorResult(t, msg.Content, 0); e.Type != "text_editor_code_execution_tool_result_error" || msg.Container.ID != "box1" {
			t.Fatalf("other user's box1: %s", msg.Content[1].RawJSON())
		}
	})

	t.Run("request errors", func(t *testing.T) {
		p := msgParams("box1", userText("x"), codeExecTool...)
		p.MaxTokens = 0
		_, err := cl.Messages.New(ctx, p)
		if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "max_tokens") || !strings.Contains(body, "invalid_request_error") {
			t.Fatalf("max_tokens 0: %d %s", st, body)
		}
		for _, tc := range []struct {
			body   string
			status int
			want   string
		}{
			{`{"model":"m","max_tokens":10,"messages":[]}`, 400, "at least one message"},
			{`{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"x"}]}`, 400, `must be \"user\" or \"assistant\"`},
			{`{"model":"m","max_tokens":10,"tools":[{"type":"code_execution_20250825","name":"bash"}],"messages":[{"role":"user","content":"x"}]}`, 400, `must be named \"code_execution\"`},
			{`{"model":"m","max_tokens":10,"container":"bad id!","messages":[{"role":"user","content":"x"}]}`, 400, "invalid container id"},
			{`{"model":"m","max_tokens":10,"container":"thr_nope","messages":[{"role":"user","content":"x"}]}`, 404, "container not found"},
			{`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, 400, "messages.0.content.0.type: required"},
			{`not json`, 400, "invalid request body"},
		} {
			r := s.do("POST", "/api/gpt/v1/messages", tok, tc.body)
			if r.status != tc.status || !strings.Contains(string(r.body), tc.want) {
				t.Errorf("%s: %d %s", tc.body, r.status, r.body)
			}
			r.errorType(t)
		}
		if r := s.do("POST", "/api/gpt/v1/messages", "", `{}`); r.status != 401 || r.errorType(t) != "authentication_error" {
			t.Fatalf("no token: %d %s", r.status, r.body)
		}
		// x-api-key is accepted as well.
		fake.Push(textStep("key ok"))
		keyClient := anthropic.NewClient(option.WithBaseURL(s.base+"/api/gpt"), option.WithAPIKey(tok), option.WithMaxRetries(0))
		msg, err := keyClient.Messages.New(ctx, msgParams("", userText("hi"), codeExecTool...))
		if err != nil || msg.Content[0].AsText().Text != "key ok" {
			t.Fatalf("x-api-key: %v", err)
		}
	})

	t.Run("validate", func(t *testing.T) {
		body := `{"model":"default","max_tokens":10,"container":"box1","tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"` + outputID + `"}]}]}`
		before := len(fake.Requests())
		r := s.do("POST", "/api/gpt/v1/messages/validate", tok, body)
		m := r.json(t)
		c, _ := m["container"].(map[string]any)
		if r.status != 200 || m["valid"] != true || m["model"] != "fake-model" || m["code_execution"] != true || c["id"] != "box1" || c["exists"] != true {
			t.Fatalf("validate: %d %s", r.status, r.body)
		}
		if fmt.Sprint(m["server_tools"]) != "[bash_code_execution text_editor_code_execution]" || fmt.Sprint(m["client_tools"]) != "[get_weather]" {
			t.Fatalf("validate tools: %s", r.body)
		}
		r = s.do("POST", "/api/gpt/v1/messages/validate", tok, strings.Replace(body, `"box1"`, `"fresh"`, 1))
		if r.status != 400 || !strings.Contains(string(r.body), "does not exist yet") {
			t.Fatalf("validate upload in a new container: %d %s", r.status, r.body)
		}
		r = s.do("POST", "/api/gpt/v1/messages/validate", tok, `{"model":"x","max_tokens":10,"container":"fresh","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`)
		if c, _ := r.json(t)["container"].(map[string]any); r.status != 200 || c["exists"] != false {
			t.Fatalf("validate new container: %d %s", r.status, r.body)
		}
		if r := s.do("POST", "/api/gpt/v1/messages/validate", tok, `{"model":"x","max_tokens":0,"messages":[]}`); r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Fatalf("validate invalid: %d %s", r.status, r.body)
		}
		if len(fake.Requests()) != before {
			t.Fatal("validate called the model")
		}
		// Nothing was created: "fresh" is still unknown to the Files API.
		if r := s.do("GET", "/api/gpt/v1/files?scope_id=fresh", tok, nil); r.status != 404 {
			t.Fatalf("validate created a container: %d %s", r.status, r.body)
		}
	})

	t.Run("non-streaming client that leaves", func(t *testing.T) {
		fake.Push(bashStep("true"), textStep("booted"))
		if _, err := cl.Messages.New(ctx, msgParams("box1", userText("boot"), codeExecTool...)); err != nil {
			t.Fatal(err)
		}
		fake.Push(bashStep("sleep 20"))
		lctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if _, err := cl.Messages.New(lctx, msgParams("box1", userText("slow"), codeExecTool...)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the request did not time out: %v", err)
		}
		noSleepWithin(t, cl, fake, 3*time.Second)
	})

	t.Run("client disconnect kills the command", func(t *testing.T) {
		// Warm up so that the sandbox, its agent connection and the
		// connection pools exist before counting.
		fake.Push(bashStep("true"), textStep("warm"))
		if _, err := cl.Messages.New(ctx, msgParams("box1", userText("warm"), codeExecTool...)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		base := runtime.NumGoroutine()

		// No reply follows: the turn ends with the client.
		fake.Push(bashStep("rm -f /home/agent/workspace/done; sleep 8; touch /home/agent/workspace/done"))
		start := time.Now()
		sctx, cancel := context.WithCancel(ctx)
		stream := cl.Messages.NewStreaming(sctx, msgParams("box1", userText("slow"), codeExecTool...))
		for stream.Next() {
			if ev := stream.Current(); ev.Type == "content_block_stop" && ev.Index == 0 {
				break // the command is running now
			}
		}
		cancel()
		stream.Close()

		// The server notices the failed writes of its pings and kills the
		// command: no sleep runs any more.
		gone := false
		for deadline := time.Now().Add(15 * time.Second); !gone && time.Now().Before(deadline); {
			fake.Push(bashStep("pgrep -x sleep || echo no-sleep"), textStep("checked"))
			msg, err := cl.Messages.New(ctx, msgParams("box1", userText("check"), codeExecTool...))
			if err != nil {
				t.Fatal(err)
			}
			_, r := bashResult(t, msg.Content, 0)
			if gone = r.Stdout == "no-sleep\n"; !gone {
				time.Sleep(500 * time.Millisecond)
			}
		}
		if !gone || time.Since(start) > 8*time.Second {
			t.Fatalf("the command still ran %v after the client left", time.Since(start))
		}
		// Every goroutine of the broken stream ended.
		n := runtime.NumGoroutine()
		for deadline := time.Now().Add(5 * time.Second); n > base+1 && time.Now().Before(deadline); n = runtime.NumGoroutine() {
			time.Sleep(100 * time.Millisecond)
		}
		if n > base+1 {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines %d, %d before the request:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Until(start.Add(9 * time.Second)))
		fake.Push(bashStep("test -e /home/agent/workspace/done && echo present || echo absent"), textStep("checked"))
		msg, err := cl.Messages.New(ctx, msgParams("box1", userText("check"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if _, r := bashResult(t, msg.Content, 0); r.Stdout != "absent\n" {
			t.Fatalf("the command finished after the client left: %+v", r)
		}
	})
}

// noSleepWithin polls the container until no sleep process runs, failing
// when one still runs at the deadline.
func noSleepWithin(t *testing.T, cl anthropic.Client, fake *fakeupstream.Server, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; {
		fake.Push(bashStep("pgrep -x sleep || echo no-sleep"), textStep("checked"))
		msg, err := cl.Messages.New(context.Background(), msgParams("box1", userText("check"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if _, r := bashResult(t, msg.Content, 0); r.Stdout == "no-sleep\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sleep still runs %v after the client left", d)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// expiredEverywhere checks that every request naming the container id, past
// its maximum age, fails with the expired container's 404 and reaches no
// model: the Messages API (twice), validate, and the Files API's list and
// upload.
func expiredEverywhere(t *testing.T, s *server, cl anthropic.Client, tok, id string) {
	t.Helper()
	want := `container \"` + id + `\" has passed its maximum age`
	for range 2 {
		_, err := cl.Messages.New(context.Background(), msgParams(id, userText("once more"), codeExecTool...))
		if st, body := apiStatus(t, err); st != 404 || !strings.Contains(body, want) {
			t.Fatalf("an expired container named again: %d %s", st, body)
		}
	}
	vbody := `{"model":"x","max_tokens":10,"container":"` + id + `","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`
	if r := s.do("POST", "/api/gpt/v1/messages/validate", tok, vbody); r.status != 404 || !strings.Contains(string(r.body), want) {
		t.Fatalf("validate of an expired container: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/api/gpt/v1/files?scope_id="+id, tok, nil); r.status != 404 || !strings.Contains(string(r.body), want) {
		t.Fatalf("files of an expired container: %d %s", r.status, r.body)
	}
	if r := s.upload(tok, id, "", "a.txt", "new"); r.status != 404 || !strings.Contains(string(r.body), want) {
		t.Fatalf("upload to an expired container: %d %s", r.status, r.body)
	}
}

// TestExpiredContainerAfterTheSweep: a container the sweeper removed at its
// maximum age, record and files, is for every later request naming it the
// error the first request after its maximum age gets, never a new, empty
// container of the same id; a request naming none gets a new default one.
func TestExpiredContainerAfterTheSweep(t *testing.T) {
	databases(t, testExpiredAfterTheSweep)
}

func testExpiredAfterTheSweep(t *testing.T, dbURL string) {
	s, fake := modelServer(t, dbURL, "anthropic", map[string]string{
		"SANDBOX_BACKEND": ",", "CONTAINER_MAX_AGE": "1s", "SWEEP_INTERVAL": "200ms", "MODEL_NAME": "",
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()
	fake.Push(textStep("hello"))
	if msg, err := cl.Messages.New(ctx, msgParams("swept", userText("hi"), codeExecTool...)); err != nil || msg.Container.ID != "swept" {
		t.Fatalf("first request: %v", err)
	}
	if r := s.upload(tok, "swept", "", "a.txt", "gone with it"); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	var dir string
	ents, _ := os.ReadDir(filepath.Join(s.dataDir, "containers"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "--swept") {
			dir = filepath.Join(s.dataDir, "containers", e.Name())
		}
	}
	if dir == "" {
		t.Fatalf("no folder of the container among %v", ents)
	}
	// The sweeper removes the record after the folder, holding the
	// container's lock throughout: a request after the folder went finds
	// no record.
	waitFor(t, 30*time.Second, func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	}, func() string { return "the sweeper did not remove the expired container\n" + s.stdout.String() })
	expiredEverywhere(t, s, cl, tok, "swept")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the expired container's folder came back: %v", err)
	}
	fake.Push(textStep("fresh"))
	if msg, err := cl.Messages.New(ctx, msgParams("", userText("again"), codeExecTool...)); err != nil || msg.Container.ID == "swept" {
		t.Fatalf("without a container: %v", err)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Fatalf("the model server got %d requests, want 2 (the refused ones reach it not)", n)
	}
}

// TestMessagesAPIWithoutSandbox covers what needs no sandbox: the
// not-configured error block, container maximum age, upstream errors
// before and during a stream, and an unreachable upstream.
func TestMessagesAPIWithoutSandbox(t *testing.T) {
	databases(t, testMessagesWithoutSandbox)
}

func testMessagesWithoutSandbox(t *testing.T, dbURL string) {
	s, fake := modelServer(t, dbURL, "anthropic", map[string]string{
		"SANDBOX_BACKEND": ",", "CONTAINER_MAX_AGE": "2s", // no backend at all
		"MODEL_NAME": "",
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	t.Run("provider not configured", func(t *testing.T) {
		fake.Push(bashStep("echo hi"), textStep("no sandbox"))
		body := `{"model":"default","max_tokens":100,"tools":[{"type":"code_execution_v1","name":"code_execution"}],"messages":[{"role":"user","content":"run"}]}`
		r := s.do("POST", "/api/gpt/v1/messages", tok, body)
		var resp msgwire.Response
		if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 || len(resp.Content) != 3 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		res := resp.Content[1].Result
		if res == nil || res.Type != "bash_code_execution_tool_result_error" || res.ErrorCode != "unavailable" || res.Detail.Explanation != "code_execution provider is not configured." {
			t.Fatalf("not configured: %s", r.body)
		}
	})

	t.Run("container maximum age", func(t *testing.T) {
		fake.Push(textStep("hello"))
		msg, err := cl.Messages.New(ctx, msgParams("old", userText("hi"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.Container.ID != "old" || msg.Container.ExpiresAt.After(time.Now().Add(3*time.Second)) {
			t.Fatalf("container %+v", msg.Container)
		}
		time.Sleep(2200 * time.Millisecond)
		// validate answers what the request would, and removes nothing.
		vbody := `{"model":"x","max_tokens":10,"container":"old","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`
		for range 2 {
			if r := s.do("POST", "/api/gpt/v1/messages/validate", tok, vbody); r.status != 404 || !strings.Contains(string(r.body), "maximum age") {
				t.Fatalf("validate of an expired container: %d %s", r.status, r.body)
			}
		}
		_, err = cl.Messages.New(ctx, msgParams("old", userText("again"), codeExecTool...))
		if st, body := apiStatus(t, err); st != 404 || !strings.Contains(body, "maximum age") {
			t.Fatalf("expired container: %d %s", st, body)
		}
		// That request removed it; every later one naming it fails the
		// same way (its tombstone), never finding a new, empty container
		// of the same id — a request, validate, the Files API.
		expiredEverywhere(t, s, cl, tok, "old")
		fake.Push(textStep("fresh"))
		if _, err := cl.Messages.New(ctx, msgParams("", userText("again"), codeExecTool...)); err != nil {
			t.Fatalf("without a container: %v", err)
		}
	})

	t.Run("streamed usage", func(t *testing.T) {
		// Two model steps (the call's result is an error block: no
		// sandbox): message_start carries the first step's start as the
		// upstream gave it (the input side, 1 output token), message_delta
		// the turn's totals.
		first := bashStep("echo hi")
		first.Usage = msgwire.Usage{InputTokens: 40, OutputTokens: 5, CacheReadInputTokens: 20}
		second := textStep("done")
		second.Usage = msgwire.Usage{InputTokens: 60, OutputTokens: 7, CacheReadInputTokens: 20}
		fake.Push(first, second)
		stream := cl.Messages.NewStreaming(ctx, msgParams("", userText("run"), codeExecTool...))
		var (
			acc   anthropic.Message
			start *anthropic.Usage
		)
		for stream.Next() {
			ev := stream.Current()
			if start == nil {
				if ev.Type != "message_start" {
					t.Fatalf("the stream opens with %s", ev.Type)
				}
				u := ev.AsMessageStart().Message.Usage
				start = &u
			}
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if start.InputTokens != 40 || start.CacheReadInputTokens != 20 || start.OutputTokens != 1 {
			t.Fatalf("message_start usage: %d input, %d cache read, %d output; want the first step's 40 and 20, and the upstream's 1", start.InputTokens, start.CacheReadInputTokens, start.OutputTokens)
		}
		if u := acc.Usage; u.InputTokens != 100 || u.OutputTokens != 12 || u.CacheReadInputTokens != 40 {
			t.Fatalf("accumulated usage: %d input, %d output, %d cache read; want 100, 12, 40", u.InputTokens, u.OutputTokens, u.CacheReadInputTokens)
		}
	})

	t.Run("upstream errors", func(t *testing.T) {
		fake.Push(fakeupstream.Reply{Status: 400, ErrorMessage: "prompt is too long"})
		_, err := cl.Messages.New(ctx, msgParams("", userText("x")))
		if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "prompt is too long") || !strings.Contains(body, "invalid_request_error") {
			t.Fatalf("upstream 400: %d %s", st, body)
		}
		// Overloaded and rate-limited upstreams are retried (after retry-after).
		fake.Push(fakeupstream.Reply{Status: 529}, textStep("after an overload"))
		if msg, err := cl.Messages.New(ctx, msgParams("", userText("x"))); err != nil || msg.Content[0].AsText().Text != "after an overload" {
			t.Fatalf("529 not retried: %v", err)
		}
		fake.Push(fakeupstream.Reply{Status: 429, Header: map[string]string{"retry-after": "1"}}, textStep("after a wait"))
		start := time.Now()
		if msg, err := cl.Messages.New(ctx, msgParams("", userText("x"))); err != nil || msg.Content[0].AsText().Text != "after a wait" {
			t.Fatalf("429 not retried: %v", err)
		}
		if waited := time.Since(start); waited < 900*time.Millisecond {
			t.Fatalf("retry-after not honoured: answered after %v", waited)
		}
		// Streaming: an error before any output is a plain HTTP error.
		fake.Push(fakeupstream.Reply{Status: 400, ErrorMessage: "bad stream request"})
		stream := cl.Messages.NewStreaming(ctx, msgParams("", userText("x")))
		for stream.Next() {
		}
		if st, body := apiStatus(t, stream.Err()); st != 400 || !strings.Contains(body, "bad stream request") {
			t.Fatalf("stream upstream 400: %d %s", st, body)
		}
		// Mid-stream: the stream ends with an error event, not a normal finish.
		fake.Push(fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: "partial answer that breaks"}}, FailAfter: 4, ErrorType: "overloaded_error", ErrorMessage: "upstream fell over"})
		r := s.do("POST", "/api/gpt/v1/messages", tok, `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
		if r.status != 200 || !strings.Contains(string(r.body), "event: error") || strings.Contains(string(r.body), "message_stop") || !strings.Contains(string(r.body), "upstream fell over") {
			t.Fatalf("mid-stream error: %d %s", r.status, r.body)
		}
		fake.Push(fakeupstream.Reply{Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: "partial answer that breaks"}}, FailAfter: 4, ErrorMessage: "upstream fell over"})
		stream = cl.Messages.NewStreaming(ctx, msgParams("", userText("x")))
		var acc anthropic.Message
		for stream.Next() {
			acc.Accumulate(stream.Current())
		}
		if stream.Err() == nil || !strings.Contains(stream.Err().Error(), "upstream fell over") {
			t.Fatalf("the SDK saw no error: %v", stream.Err())
		}
	})

	t.Run("unreachable upstream", func(t *testing.T) {
		fake.Close()
		r := s.do("POST", "/api/gpt/v1/messages", tok, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}]}`)
		if r.status != 503 || r.errorType(t) == "" {
			t.Fatalf("unreachable: %d %s", r.status, r.body)
		}
		_, err := cl.Messages.New(ctx, msgParams("", userText("x")))
		if st, _ := apiStatus(t, err); st != 503 {
			t.Fatalf("SDK unreachable: %d", st)
		}
		stream := cl.Messages.NewStreaming(ctx, msgParams("", userText("x")))
		for stream.Next() {
		}
		if st, _ := apiStatus(t, stream.Err()); st != 503 {
			t.Fatalf("SDK stream unreachable: %d", st)
		}
	})
}

// TestMessagesAPIOpenAIProvider runs the same SDK calls against a
// threadbox whose model speaks the OpenAI chat-completions format.
func TestMessagesAPIOpenAIProvider(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "openai", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_NAME": "local-llm",
	})
	cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
	ctx := context.Background()

	fake.Push(bashStep("echo from-openai > f.txt; cat f.txt"), textStep("openai done"))
	msg, err := cl.Messages.New(ctx, msgParams("oa", userText("go"), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	if _, r := bashResult(t, msg.Content, 0); r.Stdout != "from-openai\n" || msg.Content[2].AsText().Text != "openai done" || msg.Container.ID != "oa" {
		t.Fatalf("openai: %+v %v", r, blockTypes(msg.Content))
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[0].Format != fakeupstream.OpenAI || !strings.Contains(string(reqs[0].Body), `"local-llm"`) || !strings.Contains(string(reqs[1].Body), "from-openai") {
		t.Fatalf("upstream requests: %+v", reqs)
	}

	fake.Push(steps(call("text_editor_code_execution", map[string]any{"command": "view", "path": "f.txt"})), textStep("viewed"))
	stream := cl.Messages.NewStreaming(ctx, msgParams("oa", userText("view"), codeExecTool...))
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if v := editorResult(t, acc.Content, 0).AsResponseTextEditorCodeExecutionViewResultBlock(); v.Content != "from-openai" || acc.Container.ID != "oa" || acc.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("openai stream: %+v %+v %s", v, acc.Container, acc.StopReason)
	}
}

// TestMessagesAPIRunner uses the offline runner model: the fenced code of
// the last user message runs in the sandbox.
func TestMessagesAPIRunner(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
	ctx := context.Background()

	prompt := "please\n```bash\necho from-runner\n```\nand\n```python\nprint(6*7)\n```\n"
	msg, err := cl.Messages.New(ctx, msgParams("", userText(prompt), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for i, b := range msg.Content {
		if b.Type == "server_tool_use" {
			_, r := bashResult(t, msg.Content, i)
			outs = append(outs, r.Stdout)
		}
	}
	if strings.Join(outs, "|") != "from-runner\n|42\n" || msg.Content[len(msg.Content)-1].Type != "text" || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("runner: %q %v", outs, blockTypes(msg.Content))
	}

	stream := cl.Messages.NewStreaming(ctx, msgParams("", userText("just chatting"), codeExecTool...))
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || len(acc.Content) != 1 || acc.Content[0].AsText().Text != runner.ConfigureHint {
		t.Fatalf("no code: %v %v", err, blockTypes(acc.Content))
	}
}
