package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

func stepRequest() messages.StepRequest {
	return messages.StepRequest{
		Model:     "default",
		MaxTokens: 100,
		System:    json.RawMessage(`"be brief"`),
		Messages:  []wire.Message{{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "hi"}}}},
		Tools:     messages.SubToolDefinitions(),
		Extra:     map[string]json.RawMessage{"service_tier": json.RawMessage(`"auto"`)},
	}
}

var toolReply = fakeupstream.Reply{
	Content: []wire.ContentBlock{
		{Type: wire.BlockText, Text: "I will list the files for you now."},
		{Type: wire.BlockToolUse, ID: "toolu_1", Name: "bash_code_execution", Input: json.RawMessage(`{"command":"ls -la /home/agent/workspace"}`)},
	},
	Usage: wire.Usage{InputTokens: 12, OutputTokens: 7},
}

func checkToolStep(t *testing.T, res *messages.StepResult) {
	t.Helper()
	if res.StopReason != wire.StopToolUse || len(res.Content) != 2 {
		t.Fatalf("result = %+v", res)
	}
	if res.Content[0].Text != "I will list the files for you now." {
		t.Fatalf("text = %q", res.Content[0].Text)
	}
	tu := res.Content[1]
	if tu.Type != wire.BlockToolUse || tu.ID != "toolu_1" || tu.Name != "bash_code_execution" {
		t.Fatalf("tool_use = %+v", tu)
	}
	var in map[string]string
	if err := json.Unmarshal(tu.Input, &in); err != nil || in["command"] != "ls -la /home/agent/workspace" {
		t.Fatalf("input = %s (%v)", tu.Input, err)
	}
	if res.Usage.InputTokens != 12 || res.Usage.OutputTokens != 7 {
		t.Fatalf("usage = %+v", res.Usage)
	}
}

func TestStep(t *testing.T) {
	up := fakeupstream.New(toolReply)
	defer up.Close()
	m := New(Config{BaseURL: up.URL() + "/v1/", APIKey: "k", Model: "claude-test"})
	res, err := m.Step(context.Background(), stepRequest())
	if err != nil {
		t.Fatal(err)
	}
	checkToolStep(t, res)
	reqs := up.Requests()
	if len(reqs) != 1 || reqs[0].Stream {
		t.Fatalf("requests = %+v", reqs)
	}
	var body struct {
		Model       string `json:"model"`
		MaxTokens   int    `json:"max_tokens"`
		System      string `json:"system"`
		ServiceTier string `json:"service_tier"`
		Tools       []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "claude-test" || body.MaxTokens != 100 || body.System != "be brief" || body.ServiceTier != "auto" ||
		len(body.Tools) != 2 || body.Tools[1].Name != "text_editor_code_execution" || len(body.Tools[0].InputSchema) == 0 {
		t.Fatalf("body = %s", reqs[0].Body)
	}
	if got := reqs[0].Header.Get("X-Api-Key"); got != "k" {
		t.Fatalf("x-api-key header = %q", got)
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer k" {
		t.Fatalf("authorization header = %q", got)
	}
}

func TestStreamStep(t *testing.T) {
	up := fakeupstream.New(toolReply)
	defer up.Close()
	m := New(Config{BaseURL: up.URL(), Model: "claude-test"})
	var evs []messages.StepEvent
	res, err := m.StreamStep(context.Background(), stepRequest(), func(ev messages.StepEvent) error {
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkToolStep(t, res)
	if !up.Requests()[0].Stream {
		t.Fatal("upstream request was not streamed")
	}
	var text, input strings.Builder
	var kinds []messages.StepEventKind
	for _, ev := range evs {
		if ev.Kind != messages.StepBlockDelta {
			kinds = append(kinds, ev.Kind)
		}
		if ev.Kind == messages.StepBlockStart && ev.Index == 1 && (ev.Block.Name != "bash_code_execution" || ev.Block.ID != "toolu_1") {
			t.Fatalf("tool block start = %+v", ev.Block)
		}
		if ev.Kind == messages.StepBlockDelta {
			text.WriteString(ev.Delta.Text)
			input.WriteString(ev.Delta.PartialJSON)
		}
	}
	if len(evs) < 6 || text.String() != toolReply.Content[0].Text || input.String() != string(toolReply.Content[1].Input) {
		t.Fatalf("%d events, text %q, input %q", len(evs), text.String(), input.String())
	}
	want := []messages.StepEventKind{messages.StepStart, messages.StepBlockStart, messages.StepBlockStop, messages.StepBlockStart, messages.StepBlockStop}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds = %v, want %v", kinds, want)
	}
	// The step's start carries the input tokens of the upstream's
	// message_start.
	if u := evs[0].Usage; u.InputTokens != toolReply.Usage.InputTokens {
		t.Fatalf("start usage %+v, want %d input tokens", u, toolReply.Usage.InputTokens)
	}
}

func TestRetries(t *testing.T) {
	ok := fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "fine"}}}
	tests := []struct {
		name    string
		replies []fakeupstream.Reply
		stream  bool
		calls   int
		status  int // expected UpstreamError status, 0 for success
		minWait time.Duration
	}{
		{"429 waits for retry-after", []fakeupstream.Reply{{Status: 429, Header: fakeupstream.RetryAfter(300 * time.Millisecond)}, ok}, false, 2, 0, 300 * time.Millisecond},
		{"529 retried", []fakeupstream.Reply{{Status: 529, Header: fakeupstream.RetryAfter(time.Millisecond)}, ok}, true, 2, 0, 0},
		{"500 retried with backoff", []fakeupstream.Reply{{Status: 500}, ok}, false, 2, 0, 200 * time.Millisecond},
		{"bounded", []fakeupstream.Reply{
			{Status: 503, Header: fakeupstream.RetryAfter(time.Millisecond)}, {Status: 503, Header: fakeupstream.RetryAfter(time.Millisecond)},
			{Status: 503, Header: fakeupstream.RetryAfter(time.Millisecond)}, ok}, false, 3, 503, 0},
		{"400 not retried", []fakeupstream.Reply{{Status: 400, ErrorMessage: "bad field"}, ok}, true, 1, 400, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(tc.replies...)
			defer up.Close()
			m := New(Config{BaseURL: up.URL(), Model: "m", MaxRetries: 2})
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
				t.Fatalf("err = %v, want upstream status %d", err, tc.status)
			}
			if tc.status == 400 && ue.Message != "bad field" {
				t.Fatalf("message = %q", ue.Message)
			}
		})
	}
}

func TestMidStreamFailureIsNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  fakeupstream.Reply
	}{
		{"error event", fakeupstream.Reply{Content: toolReply.Content, FailAfter: 3, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}},
		{"connection cut", fakeupstream.Reply{Content: toolReply.Content, CutAfter: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(tc.rep, toolReply)
			defer up.Close()
			m := New(Config{BaseURL: up.URL(), Model: "m"})
			n := 0
			_, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { n++; return nil })
			var ue *messages.UpstreamError
			if !errors.As(err, &ue) || ue.StatusCode != 0 {
				t.Fatalf("err = %v", err)
			}
			if tc.rep.ErrorType != "" && (ue.Type != "overloaded_error" || ue.Message != "Overloaded") {
				t.Fatalf("upstream error = %+v", ue)
			}
			if n == 0 {
				t.Fatal("no events were delivered before the failure")
			}
			if len(up.Requests()) != 1 {
				t.Fatalf("retried after the stream started: %d requests", len(up.Requests()))
			}
		})
	}
}

func TestEmitErrorAborts(t *testing.T) {
	up := fakeupstream.New(toolReply)
	defer up.Close()
	m := New(Config{BaseURL: up.URL(), Model: "m"})
	gone := errors.New("client gone")
	_, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return gone })
	if !errors.Is(err, gone) {
		t.Fatalf("err = %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	up := fakeupstream.New()
	url := up.URL()
	up.Close()
	m := New(Config{BaseURL: url, Model: "m", MaxRetries: -1})
	_, err := m.Step(context.Background(), stepRequest())
	if !errors.Is(err, messages.ErrUpstreamUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if status, _ := messages.ErrorStatus(err); status != 503 {
		t.Fatalf("status = %d", status)
	}
	_, err = m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil })
	if !errors.Is(err, messages.ErrUpstreamUnavailable) {
		t.Fatalf("stream err = %v", err)
	}
}

func TestConnectionsAreReused(t *testing.T) {
	up := fakeupstream.New()
	defer up.Close()
	m := New(Config{BaseURL: up.URL(), Model: "m"})
	for i := 0; i < 5; i++ {
		if _, err := m.Step(context.Background(), stepRequest()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := up.Conns(); n != 1 {
		t.Fatalf("opened %d connections for 10 sequential requests, want 1", n)
	}
}

// TestLoopOverHTTP runs the messages loop with this adapter end to end.
func TestLoopOverHTTP(t *testing.T) {
	up := fakeupstream.New(toolReply, fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "Two files."}}})
	defer up.Close()
	svc := messages.New(New(Config{BaseURL: up.URL(), Model: "m"}), messages.Tools{CodeExecution: toolsFunc(func(ctx context.Context, c messages.ToolCall) (*wire.ToolResult, error) {
		return &wire.ToolResult{Type: wire.ResultBash, Stdout: "a\nb\n"}, nil
	})}, messages.Config{})
	for _, stream := range []bool{false, true} {
		up.Push(toolReply, fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "Two files."}}})
		req := &wire.Request{Model: "default", MaxTokens: 50, Stream: stream,
			Messages: []wire.Message{{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "ls"}}}},
			Tools:    []wire.Tool{{Type: wire.ToolTypeCodeExecution2508, Name: "code_execution"}}}
		resp, err := svc.Create(context.Background(), req, messages.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Content) != 4 || resp.Content[1].Type != wire.BlockServerToolUse || resp.Content[2].Result.Stdout != "a\nb\n" || resp.Content[3].Text != "Two files." {
			t.Fatalf("stream=%v response = %+v", stream, resp.Content)
		}
	}
	// The second upstream call carried the tool result.
	reqs := up.Requests()
	if !strings.Contains(string(reqs[1].Body), `"tool_result"`) || !strings.Contains(string(reqs[1].Body), `srvtoolu_`) {
		t.Fatalf("second upstream body = %s", reqs[1].Body)
	}
}

type toolsFunc func(context.Context, messages.ToolCall) (*wire.ToolResult, error)

func (f toolsFunc) Execute(ctx context.Context, c messages.ToolCall) (*wire.ToolResult, error) {
	return f(ctx, c)
}

func TestLongRetryAfterIsNotWaited(t *testing.T) {
	ok := fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "fine"}}}
	up := fakeupstream.New(fakeupstream.Reply{Status: 429, Header: fakeupstream.RetryAfter(time.Hour)}, ok)
	defer up.Close()
	m := New(Config{BaseURL: up.URL(), Model: "m", MaxRetryWait: time.Second})
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
	m := New(Config{BaseURL: up.URL(), Model: "m"})
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

// countingProvider counts the tracers asked of it.
type countingProvider struct {
	noop.TracerProvider
	n atomic.Int32
}

func (p *countingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	p.n.Add(1)
	return p.TracerProvider.Tracer(name, opts...)
}

// TestNoSpans: threadbox exports no traces, so the SDK must not build a
// span per call even when a provider is registered.
func TestNoSpans(t *testing.T) {
	p := &countingProvider{}
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(p)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	up := fakeupstream.New(toolReply, toolReply)
	defer up.Close()
	m := New(Config{BaseURL: up.URL(), Model: "m"})
	if _, err := m.Step(context.Background(), stepRequest()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := p.n.Load(); n != 0 {
		t.Fatalf("the SDK asked for %d tracers", n)
	}
}

// TestPlainBodyIsBody: the body of a request with only the common fields,
// written without a map, is byte for byte the one the map gives.
func TestPlainBodyIsBody(t *testing.T) {
	m := New(Config{Model: "up<model>"})
	msgs := []wire.Message{
		{Role: "user", Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "hello <b> & \u2028"}}},
		{Role: "assistant", Content: []wire.ContentBlock{{Type: wire.BlockToolUse, ID: "toolu_1", Name: "f", Input: json.RawMessage(`{"a": 1}`)}}},
		{Role: "user", Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "toolu_1", Content: json.RawMessage(`"ok"`)}}},
	}
	tools := []messages.ToolDefinition{{Name: "f", Description: "d", InputSchema: json.RawMessage(`{"type": "object"}`)},
		{Raw: json.RawMessage(`{"type":"bash_20250124","name":"bash"}`)}}
	for _, req := range []messages.StepRequest{
		{Model: "default", MaxTokens: 64, Messages: msgs},
		{Model: "", MaxTokens: 1, Messages: msgs[:1]},
		{Model: "claude-x", MaxTokens: 4096, Messages: msgs, System: json.RawMessage(` "be <brief>" `), Tools: tools},
		{Model: "claude-x", MaxTokens: 10, Messages: msgs, System: json.RawMessage(`[{"type":"text","text":"s"}]`)},
	} {
		if !plainStep(req) {
			t.Fatalf("not plain: %+v", req)
		}
		for _, stream := range []bool{false, true} {
			got, err := m.plainBody(req, stream)
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.mapBody(req, stream)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("stream %v:\n got %s\nwant %s", stream, got, want)
			}
		}
	}
	temp := 0.5
	if plainStep(messages.StepRequest{Temperature: &temp}) || plainStep(messages.StepRequest{Extra: map[string]json.RawMessage{"x": json.RawMessage(`1`)}}) {
		t.Fatal("a request with more fields taken for a plain one")
	}
}

// FuzzMarshalToolsIsMarshal: the tools array plainBody writes is
// json.Marshal's, byte for byte, whatever a client's raw definition holds.
func FuzzMarshalToolsIsMarshal(f *testing.F) {
	for _, s := range []string{
		`{"type":"bash_20250124","name":"bash"}`,
		`{ "name" : "f", "input_schema": {"type":"object"} }`,
		`{"name":"a<b>&c","description":"x\u2028y"}`,
		"{\"name\":\"raw \xe2\x80\xa8 sep\"}",
		`{"name":"q\"uote \\ back\\","n":[1, 2]}`,
		`{"name":"tab\there"}`, `{"a":"\\\""}`, `[]`, `"s"`, `1e3`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		// A canonical definition is json.Marshal's own output, as the
		// product's tools are encoded once.
		canon, err := json.Marshal(messages.ToolDefinition{Name: string(raw), InputSchema: json.RawMessage(raw)})
		if err != nil {
			t.Fatal(err)
		}
		tools := []messages.ToolDefinition{{Raw: json.RawMessage(`{"type":"code_execution_20250825","name":"code_execution"}`)}, {Raw: raw},
			{Name: "f<", Description: "d", InputSchema: json.RawMessage(`{"type": "object"}`)}, {Raw: canon, Canonical: true}}
		want, wantErr := json.Marshal(tools)
		got, err := marshalTools(tools)
		if (err == nil) != (wantErr == nil) || string(got) != string(want) {
			t.Fatalf("raw %q:\n got %s (%v)\nwant %s (%v)", raw, got, err, want, wantErr)
		}
	})
}

// TestStreamedUsageTotals: a streamed step's usage holds the cache counts
// whether the upstream gives them in message_start (as Anthropic's API
// does) or in message_delta alone, and the delta's totals win.
func TestStreamedUsageTotals(t *testing.T) {
	usage := wire.Usage{InputTokens: 12, OutputTokens: 7, CacheCreationInputTokens: 5, CacheReadInputTokens: 30}
	t.Run("fake upstream", func(t *testing.T) {
		up := fakeupstream.New(fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "hi"}}, Usage: usage})
		defer up.Close()
		res, err := New(Config{BaseURL: up.URL(), Model: "claude-test"}).StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res.Usage != usage {
			t.Fatalf("usage %+v, want %+v", res.Usage, usage)
		}
	})
	t.Run("counts in message_delta alone", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":12,\"output_tokens\":7,\"cache_creation_input_tokens\":5,\"cache_read_input_tokens\":30}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		}))
		defer srv.Close()
		res, err := New(Config{BaseURL: srv.URL, Model: "claude-test"}).StreamStep(context.Background(), stepRequest(), func(messages.StepEvent) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res.Usage != usage {
			t.Fatalf("usage %+v, want %+v", res.Usage, usage)
		}
	})
}
