package openai

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

func stepRequest() messages.StepRequest {
	return messages.StepRequest{
		Model:     "default",
		MaxTokens: 100,
		System:    json.RawMessage(`[{"type":"text","text":"be brief"}]`),
		Messages: []wire.Message{
			{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "count files"}}},
			{Role: wire.RoleAssistant, Content: []wire.ContentBlock{
				{Type: wire.BlockText, Text: "Running."},
				{Type: wire.BlockToolUse, ID: "srvtoolu_A", Name: "bash_code_execution", Input: json.RawMessage(`{"command":"ls"}`)},
			}},
			{Role: wire.RoleUser, Content: []wire.ContentBlock{
				{Type: wire.BlockToolResult, ToolUseID: "srvtoolu_A", Content: json.RawMessage(`"a b"`)},
				{Type: wire.BlockText, Text: "and?"},
			}},
		},
		Tools:      messages.SubToolDefinitions(),
		ToolChoice: json.RawMessage(`{"type":"any"}`),
	}
}

var toolReply = fakeupstream.Reply{
	Content: []wire.ContentBlock{
		{Type: wire.BlockText, Text: "Let me look at the workspace files."},
		{Type: wire.BlockToolUse, ID: "call_1", Name: "bash_code_execution", Input: json.RawMessage(`{"command":"ls -la /home/agent/workspace | wc -l"}`)},
		{Type: wire.BlockToolUse, ID: "call_2", Name: "text_editor_code_execution", Input: json.RawMessage(`{"command":"view","path":"notes.md"}`)},
	},
	Usage: wire.Usage{InputTokens: 20, OutputTokens: 9},
}

func checkToolStep(t *testing.T, res *messages.StepResult) {
	t.Helper()
	if res.StopReason != wire.StopToolUse || len(res.Content) != 3 {
		t.Fatalf("result = %+v", res)
	}
	if res.Content[0].Type != wire.BlockText || res.Content[0].Text != "Let me look at the workspace files." {
		t.Fatalf("text = %+v", res.Content[0])
	}
	for i, want := range toolReply.Content[1:] {
		got := res.Content[i+1]
		if got.Type != wire.BlockToolUse || got.ID != want.ID || got.Name != want.Name || string(got.Input) != string(want.Input) {
			t.Fatalf("tool_use %d = %+v (input %s)", i, got, got.Input)
		}
	}
	if res.Usage.InputTokens != 20 || res.Usage.OutputTokens != 9 {
		t.Fatalf("usage = %+v", res.Usage)
	}
}

func checkBody(t *testing.T, raw json.RawMessage, stream bool) {
	t.Helper()
	var body struct {
		Model      string          `json:"model"`
		MaxTokens  int             `json:"max_tokens"`
		Stream     bool            `json:"stream"`
		ToolChoice json.RawMessage `json:"tool_choice"`
		Messages   []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "qwen" || body.MaxTokens != 100 || body.Stream != stream || string(body.ToolChoice) != `"required"` {
		t.Fatalf("body = %s", raw)
	}
	roles := []string{}
	for _, m := range body.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,user" {
		t.Fatalf("roles = %v in %s", roles, raw)
	}
	a := body.Messages[2]
	if string(a.Content) != `"Running."` || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "srvtoolu_A" || a.ToolCalls[0].Function.Arguments != `{"command":"ls"}` {
		t.Fatalf("assistant = %+v", a)
	}
	if tm := body.Messages[3]; tm.ToolCallID != "srvtoolu_A" || string(tm.Content) != `"a b"` {
		t.Fatalf("tool message = %+v", tm)
	}
	if len(body.Tools) != 2 || body.Tools[0].Type != "function" || body.Tools[0].Function.Name != "bash_code_execution" || len(body.Tools[0].Function.Parameters) == 0 {
		t.Fatalf("tools = %+v", body.Tools)
	}
}

func TestStep(t *testing.T) {
	up := fakeupstream.New(toolReply)
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1", APIKey: "k", Model: "qwen"})
	res, err := m.Step(context.Background(), stepRequest())
	if err != nil {
		t.Fatal(err)
	}
	checkToolStep(t, res)
	reqs := up.Requests()
	if len(reqs) != 1 || reqs[0].Format != fakeupstream.OpenAI || reqs[0].Header.Get("Authorization") != "Bearer k" {
		t.Fatalf("requests = %+v", reqs)
	}
	checkBody(t, reqs[0].Body, false)
}

func TestStreamStep(t *testing.T) {
	up := fakeupstream.New(toolReply)
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen"})
	var evs []messages.StepEvent
	res, err := m.StreamStep(context.Background(), stepRequest(), func(ev messages.StepEvent) error {
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkToolStep(t, res)
	checkBody(t, up.Requests()[0].Body, true)
	// Blocks open and close in order; deltas rebuild text and inputs.
	var got [3]strings.Builder
	open := -1
	for _, ev := range evs {
		switch ev.Kind {
		case messages.StepBlockStart:
			if open != -1 || ev.Index != len(got) && ev.Index > 2 {
				t.Fatalf("block %d opened while %d open", ev.Index, open)
			}
			open = ev.Index
			if ev.Index == 2 && (ev.Block.ID != "call_2" || ev.Block.Name != "text_editor_code_execution") {
				t.Fatalf("tool start = %+v", ev.Block)
			}
		case messages.StepBlockDelta:
			if ev.Index != open {
				t.Fatalf("delta for %d while %d open", ev.Index, open)
			}
			got[ev.Index].WriteString(ev.Delta.Text + ev.Delta.PartialJSON)
		case messages.StepBlockStop:
			if ev.Index != open {
				t.Fatalf("stop for %d while %d open", ev.Index, open)
			}
			open = -1
		}
	}
	if open != -1 || got[0].String() != toolReply.Content[0].Text || got[1].String() != string(toolReply.Content[1].Input) {
		t.Fatalf("deltas: %q %q (open %d)", got[0].String(), got[1].String(), open)
	}
}

func TestTextOnlyAndLength(t *testing.T) {
	up := fakeupstream.New(fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "cut"}}, StopReason: wire.StopMaxTokens})
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen"})
	res, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != wire.StopMaxTokens || len(res.Content) != 1 || res.Content[0].Text != "cut" {
		t.Fatalf("result = %+v", res)
	}
}

func TestRetriesAndErrors(t *testing.T) {
	ok := fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "fine"}}}
	tests := []struct {
		name    string
		replies []fakeupstream.Reply
		stream  bool
		calls   int
		status  int
		minWait time.Duration
	}{
		{"429 waits for retry-after", []fakeupstream.Reply{{Status: 429, Header: fakeupstream.RetryAfter(300 * time.Millisecond)}, ok}, true, 2, 0, 300 * time.Millisecond},
		{"502 retried with backoff", []fakeupstream.Reply{{Status: 502}, ok}, false, 2, 0, 200 * time.Millisecond},
		{"bounded", []fakeupstream.Reply{{Status: 500, Header: fakeupstream.RetryAfter(time.Millisecond)}, {Status: 500, Header: fakeupstream.RetryAfter(time.Millisecond)}, ok}, false, 2, 500, 0},
		{"400 not retried", []fakeupstream.Reply{{Status: 400, ErrorMessage: "bad"}, ok}, false, 1, 400, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(tc.replies...)
			defer up.Close()
			m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen", MaxRetries: 1})
			start := time.Now()
			var err error
			if tc.stream {
				_, err = m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil })
			} else {
				_, err = m.Step(context.Background(), stepRequest())
			}
			if n := len(up.Requests()); n != tc.calls {
				t.Fatalf("upstream saw %d requests, want %d", n, tc.calls)
			}
			if waited := time.Since(start); waited < tc.minWait {
				t.Fatalf("returned after %v, want at least %v", waited, tc.minWait)
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ue *messages.UpstreamError
			if !errors.As(err, &ue) || ue.StatusCode != tc.status {
				t.Fatalf("err = %v, want status %d", err, tc.status)
			}
		})
	}
}

func TestMidStreamFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  fakeupstream.Reply
	}{
		{"error chunk", fakeupstream.Reply{Content: toolReply.Content, FailAfter: 3, ErrorMessage: "engine died"}},
		{"connection cut", fakeupstream.Reply{Content: toolReply.Content, CutAfter: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(tc.rep, toolReply)
			defer up.Close()
			m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen"})
			n := 0
			_, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { n++; return nil })
			var ue *messages.UpstreamError
			if !errors.As(err, &ue) || ue.StatusCode != 0 || n == 0 || len(up.Requests()) != 1 {
				t.Fatalf("err %v, %d events, %d requests", err, n, len(up.Requests()))
			}
			if tc.rep.ErrorMessage != "" && !strings.Contains(ue.Message, "engine died") {
				t.Fatalf("message = %q", ue.Message)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	up := fakeupstream.New()
	url := up.URL()
	up.Close()
	m := New(Config{BaseURL: url + "/v1", Model: "qwen", MaxRetries: -1})
	if _, err := m.Step(context.Background(), stepRequest()); !errors.Is(err, messages.ErrUpstreamUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if _, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil }); !errors.Is(err, messages.ErrUpstreamUnavailable) {
		t.Fatalf("stream err = %v", err)
	}
}

func TestConnectionsAreReused(t *testing.T) {
	up := fakeupstream.New()
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen"})
	for i := 0; i < 5; i++ {
		if _, err := m.Step(context.Background(), stepRequest()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := up.Conns(); n != 1 {
		t.Fatalf("opened %d connections, want 1", n)
	}
}

func TestLongRetryAfterIsNotWaited(t *testing.T) {
	ok := fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "fine"}}}
	up := fakeupstream.New(fakeupstream.Reply{Status: 429, Header: fakeupstream.RetryAfter(time.Hour)}, ok)
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1", Model: "m", MaxRetryWait: time.Second})
	start := time.Now()
	_, err := m.Step(context.Background(), stepRequest())
	var ue *messages.UpstreamError
	if !errors.As(err, &ue) || ue.StatusCode != 429 || ue.Type != "rate_limit_error" {
		t.Fatalf("err = %v", err)
	}
	if n := len(up.Requests()); n != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("%d requests in %v", n, time.Since(start))
	}
	if status, _ := messages.ErrorStatus(err); status != 429 {
		t.Fatalf("status = %d", status)
	}
}

func TestCancelMidStream(t *testing.T) {
	slow := toolReply
	slow.EventDelay = 50 * time.Millisecond
	up := fakeupstream.New(slow)
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1", Model: "m"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	_, err := m.StreamStep(ctx, stepRequest(), func(messages.StepEvent) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v to stop", d)
	}
}

// TestFinishReasons: finish reasons and calls map to the stop reason the
// loop acts on: a call cut at max_tokens is max_tokens (the loop must not
// run half a command), calls after "stop" are tool_use, and "tool_calls"
// naming no call (a server whose tool parser failed) is end_turn, since
// tool_use promises a tool_use block.
func TestFinishReasons(t *testing.T) {
	call := wire.ContentBlock{Type: wire.BlockToolUse, ID: "call_1", Name: "bash_code_execution", Input: json.RawMessage(`{"command":"echo hi"}`)}
	text := wire.ContentBlock{Type: wire.BlockText, Text: "Let me check."}
	tests := []struct {
		name  string
		reply fakeupstream.Reply
		want  string
	}{
		{"a call cut at length", fakeupstream.Reply{Content: []wire.ContentBlock{text, call}, StopReason: wire.StopMaxTokens}, wire.StopMaxTokens},
		{"calls after stop", fakeupstream.Reply{Content: []wire.ContentBlock{call}, StopReason: wire.StopEndTurn}, wire.StopToolUse},
		{"tool_calls without a call", fakeupstream.Reply{Content: []wire.ContentBlock{text}, StopReason: wire.StopToolUse}, wire.StopEndTurn},
		{"text cut at length", fakeupstream.Reply{Content: []wire.ContentBlock{text}, StopReason: wire.StopMaxTokens}, wire.StopMaxTokens},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			up := fakeupstream.New(tc.reply)
			m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen"})
			var res *messages.StepResult
			var err error
			if stream {
				res, err = m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil })
			} else {
				res, err = m.Step(context.Background(), stepRequest())
			}
			up.Close()
			if err != nil {
				t.Fatalf("%s (stream %v): %v", tc.name, stream, err)
			}
			if res.StopReason != tc.want {
				t.Errorf("%s (stream %v): stop_reason %q, want %q", tc.name, stream, res.StopReason, tc.want)
			}
		}
	}
}

// TestImagesOnlyAsData: an image reaches the server only as a data: URL of
// its base64 source; an image whose source is anything else — a URL, a
// made-up type carrying a url member, a provider's file, a member spelt in
// another case — stops the step before any request, so the server never
// gets a URL to fetch.
func TestImagesOnlyAsData(t *testing.T) {
	const internal = "http://169.254.169.254/latest/meta-data/"
	tests := []struct {
		name  string
		block string
		want  string // the image_url sent, or "" when the step must fail
	}{
		{"base64 is sent as data", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0K"}}`, "data:image/png;base64,iVBORw0K"},
		{"a url source", `{"type":"image","source":{"type":"url","url":"` + internal + `"}}`, ""},
		{"an unknown type with a url", `{"type":"image","source":{"type":"link","url":"` + internal + `"}}`, ""},
		{"a type in capitals", `{"type":"image","source":{"type":"URL","url":"` + internal + `"}}`, ""},
		{"a provider's file", `{"type":"image","source":{"type":"file","file_id":"file_1","url":"` + internal + `"}}`, ""},
		{"no type", `{"type":"image","source":{"url":"` + internal + `"}}`, ""},
		{"a Source member beside the source", `{"type":"image","Source":{"type":"url","url":"` + internal + `"}}`, ""},
		{"a media type that is not an image", `{"type":"image","source":{"type":"base64","media_type":"text/html","data":"PGh0bWw+"}}`, ""},
		{"a media type that ends the data URL's head", `{"type":"image","source":{"type":"base64","media_type":"image/png,` + internal + `","data":"x"}}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "seen"}}})
			defer up.Close()
			m := New(Config{BaseURL: up.URL() + "/v1", Model: "qwen"})
			var img wire.ContentBlock
			if err := json.Unmarshal([]byte(tc.block), &img); err != nil {
				t.Fatal(err)
			}
			req := messages.StepRequest{Model: "default", MaxTokens: 10, Messages: []wire.Message{
				{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "what is this"}, img}},
			}}
			_, err := m.Step(context.Background(), req)
			reqs := up.Requests()
			if tc.want == "" {
				if err == nil || len(reqs) != 0 {
					t.Fatalf("step: %v, %d requests sent; want an error and none", err, len(reqs))
				}
				return
			}
			if err != nil || len(reqs) != 1 {
				t.Fatalf("step: %v, %d requests", err, len(reqs))
			}
			var body struct {
				Messages []struct {
					Content []struct {
						Type     string `json:"type"`
						ImageURL struct {
							URL string `json:"url"`
						} `json:"image_url"`
					} `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(reqs[0].Body, &body); err != nil || len(body.Messages) != 1 || len(body.Messages[0].Content) != 2 {
				t.Fatalf("body %s: %v", reqs[0].Body, err)
			}
			if got := body.Messages[0].Content[1]; got.Type != "image_url" || got.ImageURL.URL != tc.want {
				t.Fatalf("image part %+v, want %s", got, tc.want)
			}
		})
	}
}

// TestFlattenedText: a system prompt and a tool result, each a string or
// content blocks, flatten to their text; a system prompt's blocks are
// joined by a blank line, a result's by a newline, and a result that is
// neither is passed on as it came.
func TestFlattenedText(t *testing.T) {
	blocks := json.RawMessage(`[{"type":"text","text":"one"},{"type":"image","source":{"type":"url","url":"http://x/y.png"}},{"type":"text","text":"two"}]`)
	for _, c := range []struct {
		name, got, want string
	}{
		{"system string", systemText(json.RawMessage(`"be brief"`)), "be brief"},
		{"system blocks", systemText(blocks), "one\n\ntwo"},
		{"system empty", systemText(nil), ""},
		{"system neither", systemText(json.RawMessage(`{"a":1}`)), ""},
		{"result string", resultText(json.RawMessage(`"done"`)), "done"},
		{"result blocks", resultText(blocks), "one\ntwo"},
		{"result neither", resultText(json.RawMessage(`{"a":1}`)), `{"a":1}`},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
}
