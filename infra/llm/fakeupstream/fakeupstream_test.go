package fakeupstream

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"threadbox/app/messages/wire"
)

// TestDelay: a reply's Delay holds the answer back, and a caller that
// gives up is not kept waiting.
func TestDelay(t *testing.T) {
	text := []wire.ContentBlock{{Type: wire.BlockText, Text: "ok"}}
	s := New(Reply{Content: text, Delay: 80 * time.Millisecond}, Reply{Content: text, Delay: time.Hour})
	call := func(ctx context.Context) (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/messages", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return time.Since(start), err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && !strings.Contains(string(b), `"ok"`) {
			t.Fatalf("body %s", b)
		}
		return time.Since(start), err
	}
	if d, err := call(context.Background()); err != nil || d < 80*time.Millisecond {
		t.Fatalf("delayed reply after %s, %v", d, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := call(ctx); err == nil {
		t.Fatal("a call abandoned during an hour's delay succeeded")
	}
	// Close waits for running handlers: it returns only if the abandoned
	// one stopped waiting.
	s.Close()
}

// TestStrict: requests the providers document as refused get their 400;
// valid ones are answered.
func TestStrict(t *testing.T) {
	s := New()
	defer s.Close()
	post := func(path, body string) (int, string) {
		resp, err := http.Post(s.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const tools = `"tools":[{"name":"f","input_schema":{"type":"object"}}]`
	use := `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}`
	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}`
	anthropic := []struct {
		name, body, refusal string
	}{
		{"plain", `{"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"tools used and defined", `{"messages":[{"role":"user","content":"hi"},` + use + `,` + result + `],` + tools + `}`, ""},
		{"tool blocks without tools", `{"messages":[{"role":"user","content":"hi"},` + use + `,` + result + `]}`, "must define tools"},
		{"a call without its result", `{"messages":[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":"next"}],` + tools + `}`, "without `tool_result` blocks immediately after: t1"},
		{"a result without its call", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a"},` + result + `],` + tools + `}`, "unexpected `tool_use_id`"},
		{"a result after text", `{"messages":[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t1","content":"r"}]}],` + tools + `}`, "must come first"},
		{"empty text", `{"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "must be non-empty"},
		{"assistant first", `{"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"hi"}]}`, "first message"},
	}
	for _, tc := range anthropic {
		status, body := post("/v1/messages", tc.body)
		if tc.refusal == "" && status != 200 || tc.refusal != "" && (status != 400 || !strings.Contains(body, tc.refusal) || !strings.Contains(body, "invalid_request_error")) {
			t.Errorf("anthropic %s: %d %s", tc.name, status, body)
		}
	}
	const oaTools = `"tools":[{"type":"function","function":{"name":"f"}}]`
	call := `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	answer := `{"role":"tool","tool_call_id":"c1","content":"r"}`
	openai := []struct {
		name, body, refusal string
	}{
		{"plain", `{"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"calls answered", `{"messages":[{"role":"user","content":"hi"},` + call + `,` + answer + `],` + oaTools + `}`, ""},
		{"calls without tools", `{"messages":[{"role":"user","content":"hi"},` + call + `,` + answer + `]}`, "require 'tools'"},
		{"a call unanswered", `{"messages":[{"role":"user","content":"hi"},` + call + `,{"role":"user","content":"x"}],` + oaTools + `}`, "did not have response messages: c1"},
		{"an answer without a call", `{"messages":[{"role":"user","content":"hi"},` + answer + `],` + oaTools + `}`, "must be a response to a preceeding message"},
	}
	for _, tc := range openai {
		status, body := post("/v1/chat/completions", tc.body)
		if tc.refusal == "" && status != 200 || tc.refusal != "" && (status != 400 || !strings.Contains(body, tc.refusal)) {
			t.Errorf("openai %s: %d %s", tc.name, status, body)
		}
	}
	if n := len(s.Refused()); n != 9 {
		t.Errorf("%d refusals recorded, want 9", n)
	}
}

// TestChunks: streamed text is split into pieces of at most n bytes that
// never cut a UTF-8 sequence (a rune longer than n is a piece of its own),
// and the pieces add up to the text.
func TestChunks(t *testing.T) {
	tests := []struct {
		text string
		n    int
		want []string
	}{
		{"abcdef", 4, []string{"abcd", "ef"}},
		{"abc", 4, []string{"abc"}},
		{"", 4, []string{""}},
		{"abé", 3, []string{"ab", "é"}},
		{"東京", 4, []string{"東", "京"}},
		{"🌸x", 2, []string{"🌸", "x"}},
	}
	for _, tc := range tests {
		got := chunks(tc.text, tc.n)
		if !slices.Equal(got, tc.want) {
			t.Errorf("chunks(%q, %d) = %q, want %q", tc.text, tc.n, got, tc.want)
		}
		for _, c := range got {
			if !utf8.ValidString(c) {
				t.Errorf("chunks(%q, %d): piece %q is not valid UTF-8", tc.text, tc.n, c)
			}
		}
	}
}
