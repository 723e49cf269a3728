// Package fakeupstream is a scripted model server on loopback for tests and
// benchmarks. It speaks the Anthropic Messages wire format (POST
// /v1/messages, JSON or SSE) and the OpenAI chat-completions format (POST
// /v1/chat/completions, JSON or SSE with tool calls), answering each request
// with the next scripted Reply. Like the real providers, it refuses a
// request that breaks their documented rules (strict.go) with a 400.
package fakeupstream

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"threadbox/app/messages/wire"
)

// Format names a wire format.
type Format string

// The wire formats served.
const (
	Anthropic Format = "anthropic"
	OpenAI    Format = "openai"
)

// Reply is one scripted answer.
type Reply struct {
	// Status, when not 0 or 200, answers with an error of that status.
	Status int
	// Header is added to the answer (e.g. "retry-after").
	Header map[string]string
	// ErrorType and ErrorMessage describe an error answer or a mid-stream
	// error; ErrorType defaults from Status.
	ErrorType    string
	ErrorMessage string
	// ErrorBody, when set, is an error answer's body as is, in place of
	// the provider's JSON error (a proxy's HTML page, a plain-text 404).
	ErrorBody string
	// Content is the assistant's turn: text and tool_use blocks.
	Content []wire.ContentBlock
	// StopReason defaults to tool_use when Content calls a tool, else end_turn.
	StopReason string
	// StopSequence is the stop sequence that ended the answer, for
	// StopReason stop_sequence (the OpenAI format has no place for it).
	StopSequence string
	// Usage is reported as is.
	Usage wire.Usage
	// FailAfter, when positive, ends a streamed answer with an error after
	// that many events (Anthropic: an error event; OpenAI: an error chunk).
	FailAfter int
	// CutAfter, when positive, drops the connection after that many events.
	CutAfter int
	// Hangup drops the connection before answering anything, as a server
	// that crashed or a proxy that reset it.
	Hangup bool
	// EventDelay is slept before each streamed event.
	EventDelay time.Duration
	// Delay is slept before the answer starts, as a model takes its time
	// to the first token; the request's end cuts it short.
	Delay time.Duration
	// Gate, when set, holds the answer until it is closed, as a model
	// still thinking while a test looks at what the server does
	// meanwhile; the request's end cuts it short.
	Gate <-chan struct{}
}

// Request is one request the server received.
type Request struct {
	Format Format
	// Path is the request's path; empty for Messages and chat-completions
	// requests, /v1/messages/count_tokens for a token count.
	Path   string
	Stream bool
	Header http.Header
	Body   json.RawMessage
}

// Server is a running fake upstream.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	script   []Reply
	requests []Request
	fallback func(Format, json.RawMessage) Reply
	conns    int
	refused  []string // why requests a real provider would refuse were refused
}

// New starts a server answering with the scripted replies in order.
func New(replies ...Reply) *Server {
	s := &Server{script: replies}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { s.serve(Anthropic, w, r) })
	mux.HandleFunc("POST /v1/messages/count_tokens", s.serveCount)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(OpenAI, w, r) })
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	s.srv.Start()
	return s
}

// URL returns the server's base URL (no /v1).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Push appends replies to the script.
func (s *Server) Push(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
}

// SetFallback sets how to answer once the script is exhausted; without one
// the server answers with the text "ok".
func (s *Server) SetFallback(f func(Format, json.RawMessage) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallback = f
}

// Conns returns how many connections clients opened so far.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Refused returns why the requests a real provider would have refused were
// refused (400 invalid_request_error), in order.
func (s *Server) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refused...)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(f Format, w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	var head struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &head)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Format: f, Stream: head.Stream, Header: r.Header.Clone(), Body: body})
	refusal := refuseAnthropic(body)
	if f == OpenAI {
		refusal = refuseOpenAI(body)
	}
	if refusal != "" {
		s.refused = append(s.refused, refusal)
		s.mu.Unlock()
		writeError(f, w, Reply{Status: http.StatusBadRequest, ErrorType: "invalid_request_error", ErrorMessage: refusal})
		return
	}
	var rep Reply
	switch {
	case len(s.script) > 0:
		rep = s.script[0]
		s.script = s.script[1:]
	case s.fallback != nil:
		rep = s.fallback(f, body)
	default:
		rep = Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "ok"}}}
	}
	s.mu.Unlock()

	if rep.Hangup {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // drops the connection all the same
	}
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rep.Gate != nil {
		select {
		case <-rep.Gate:
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		writeError(f, w, rep)
		return
	}
	if rep.StopReason == "" {
		rep.StopReason = wire.StopEndTurn
		for _, b := range rep.Content {
			if b.Type == wire.BlockToolUse {
				rep.StopReason = wire.StopToolUse
			}
		}
	}
	switch {
	case f == Anthropic && head.Stream:
		streamAnthropic(w, rep)
	case f == Anthropic:
		writeJSON(w, anthropicMessage(rep, rep.Content))
	case head.Stream:
		streamOpenAI(w, rep)
	default:
		writeJSON(w, openAICompletion(rep))
	}
}

func errorType(rep Reply) string {
	if rep.ErrorType != "" {
		return rep.ErrorType
	}
	switch {
	case rep.Status == 429:
		return "rate_limit_error"
	case rep.Status == 529:
		return "overloaded_error"
	case rep.Status >= 500:
		return "api_error"
	case rep.Status == 401:
		return "authentication_error"
	}
	return "invalid_request_error"
}

func writeError(f Format, w http.ResponseWriter, rep Reply) {
	if rep.ErrorBody != "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(rep.Status)
		_, _ = fmt.Fprint(w, rep.ErrorBody)
		return
	}
	msg := rep.ErrorMessage
	if msg == "" {
		msg = http.StatusText(rep.Status)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.Status)
	if f == OpenAI {
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": errorType(rep), "code": nil}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": errorType(rep), "message": msg}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func anthropicMessage(rep Reply, content []wire.ContentBlock) *wire.Response {
	if content == nil {
		content = []wire.ContentBlock{}
	}
	var seq *string
	if rep.StopSequence != "" {
		seq = &rep.StopSequence
	}
	return &wire.Response{
		ID: "msg_fake", Type: "message", Role: wire.RoleAssistant, Model: "fake-model",
		Content: content, StopReason: rep.StopReason, StopSequence: seq, Usage: rep.Usage,
	}
}

// sse writes events and counts them for FailAfter and CutAfter.
type sse struct {
	w     http.ResponseWriter
	rep   Reply
	n     int
	ended bool
}

func newSSE(w http.ResponseWriter, rep Reply) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rep: rep}
}

// event writes one event; it reports false once the stream was ended.
func (s *sse) event(name string, data any, fail func()) bool {
	if s.ended {
		return false
	}
	if s.rep.CutAfter > 0 && s.n >= s.rep.CutAfter {
		s.ended = true
		if hj, ok := s.w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
		return false
	}
	if s.rep.FailAfter > 0 && s.n >= s.rep.FailAfter {
		s.ended = true
		fail()
		return false
	}
	if s.rep.EventDelay > 0 {
		time.Sleep(s.rep.EventDelay)
	}
	b, _ := json.Marshal(data)
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if fl, ok := s.w.(http.Flusher); ok {
		fl.Flush()
	}
	s.n++
	return true
}

func (s *sse) raw(text string) {
	fmt.Fprint(s.w, text)
	if fl, ok := s.w.(http.Flusher); ok {
		fl.Flush()
	}
}

// chunks splits s into pieces of at most n bytes (more for a rune that
// does not fit), never inside a UTF-8 sequence: each piece is a JSON
// string of its own, as a provider sends it.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			_, cut = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

func streamAnthropic(w http.ResponseWriter, rep Reply) {
	s := newSSE(w, rep)
	fail := func() {
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": errorType(Reply{Status: 529, ErrorType: rep.ErrorType}), "message": orDefault(rep.ErrorMessage, "Overloaded")}})
		s.raw("event: error\ndata: " + string(b) + "\n\n")
	}
	start := anthropicMessage(rep, nil)
	start.StopReason, start.StopSequence = "", nil
	// As Anthropic's API does: the input side's counts in message_start,
	// the totals again in message_delta.
	start.Usage = wire.Usage{InputTokens: rep.Usage.InputTokens, CacheCreationInputTokens: rep.Usage.CacheCreationInputTokens, CacheReadInputTokens: rep.Usage.CacheReadInputTokens, OutputTokens: min(rep.Usage.OutputTokens, 1)}
	if !s.event(wire.EventMessageStart, wire.Event{Type: wire.EventMessageStart, Message: start}, fail) {
		return
	}
	if !s.event(wire.EventPing, wire.Event{Type: wire.EventPing}, fail) {
		return
	}
	for i, b := range rep.Content {
		st := b
		var deltas []wire.BlockDelta
		switch b.Type {
		case wire.BlockText:
			st.Text = ""
			for _, c := range chunks(b.Text, 16) {
				deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaText, Text: c})
			}
		case wire.BlockThinking:
			st.Thinking, st.Signature = "", ""
			for _, c := range chunks(b.Thinking, 16) {
				deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaThinking, Thinking: c})
			}
			if b.Signature != "" {
				deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaSignature, Signature: b.Signature})
			}
		case wire.BlockToolUse, wire.BlockServerToolUse:
			// As Anthropic streams them: the input comes in deltas.
			st.Input = json.RawMessage(`{}`)
			for _, c := range chunks(string(b.Input), 16) {
				deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaInputJSON, PartialJSON: c})
			}
		}
		if !s.event(wire.EventContentBlockStart, wire.Event{Type: wire.EventContentBlockStart, Index: i, ContentBlock: &st}, fail) {
			return
		}
		for _, d := range deltas {
			if !s.event(wire.EventContentBlockDelta, wire.Event{Type: wire.EventContentBlockDelta, Index: i, Delta: &d}, fail) {
				return
			}
		}
		if !s.event(wire.EventContentBlockStop, wire.Event{Type: wire.EventContentBlockStop, Index: i}, fail) {
			return
		}
	}
	u := rep.Usage
	if !s.event(wire.EventMessageDelta, wire.Event{Type: wire.EventMessageDelta, MessageDelta: &wire.MessageDelta{StopReason: rep.StopReason, StopSequence: anthropicMessage(rep, nil).StopSequence}, Usage: &u}, fail) {
		return
	}
	s.event(wire.EventMessageStop, wire.Event{Type: wire.EventMessageStop}, fail)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// OpenAI wire shapes.
type (
	oaFunction struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	oaToolCall struct {
		Index    *int       `json:"index,omitempty"`
		ID       string     `json:"id,omitempty"`
		Type     string     `json:"type,omitempty"`
		Function oaFunction `json:"function"`
	}
	oaMessage struct {
		Role      string       `json:"role,omitempty"`
		Content   *string      `json:"content"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	}
	oaChoice struct {
		Index        int        `json:"index"`
		Message      *oaMessage `json:"message,omitempty"`
		Delta        *oaMessage `json:"delta,omitempty"`
		FinishReason *string    `json:"finish_reason"`
	}
	oaUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	oaCompletion struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []oaChoice `json:"choices"`
		Usage   *oaUsage   `json:"usage,omitempty"`
	}
)

func finishReason(stop string) string {
	switch stop {
	case wire.StopToolUse:
		return "tool_calls"
	case wire.StopMaxTokens:
		return "length"
	}
	return "stop"
}

func openAICompletion(rep Reply) *oaCompletion {
	msg := &oaMessage{Role: "assistant"}
	text := ""
	for _, b := range rep.Content {
		switch b.Type {
		case wire.BlockText:
			text += b.Text
		case wire.BlockToolUse:
			msg.ToolCalls = append(msg.ToolCalls, oaToolCall{ID: b.ID, Type: "function", Function: oaFunction{Name: b.Name, Arguments: string(b.Input)}})
		}
	}
	if text != "" || len(msg.ToolCalls) == 0 {
		msg.Content = &text
	}
	fr := finishReason(rep.StopReason)
	u := rep.Usage
	return &oaCompletion{
		ID: "chatcmpl-fake", Object: "chat.completion", Created: time.Now().Unix(), Model: "fake-model",
		Choices: []oaChoice{{Message: msg, FinishReason: &fr}},
		Usage:   &oaUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens},
	}
}

func streamOpenAI(w http.ResponseWriter, rep Reply) {
	s := newSSE(w, rep)
	fail := func() {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": orDefault(rep.ErrorMessage, "upstream failed"), "type": orDefault(rep.ErrorType, "server_error")}})
		s.raw("data: " + string(b) + "\n\n")
	}
	chunk := func(delta *oaMessage, finish *string) oaCompletion {
		return oaCompletion{ID: "chatcmpl-fake", Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: "fake-model",
			Choices: []oaChoice{{Delta: delta, FinishReason: finish}}}
	}
	empty := ""
	if !s.event("", chunk(&oaMessage{Role: "assistant", Content: &empty}, nil), fail) {
		return
	}
	tool := 0
	for _, b := range rep.Content {
		switch b.Type {
		case wire.BlockText:
			for _, c := range chunks(b.Text, 16) {
				c := c
				if !s.event("", chunk(&oaMessage{Content: &c}, nil), fail) {
					return
				}
			}
		case wire.BlockToolUse:
			idx := tool
			tool++
			if !s.event("", chunk(&oaMessage{ToolCalls: []oaToolCall{{Index: &idx, ID: b.ID, Type: "function", Function: oaFunction{Name: b.Name}}}}, nil), fail) {
				return
			}
			for _, c := range chunks(string(b.Input), 16) {
				if !s.event("", chunk(&oaMessage{ToolCalls: []oaToolCall{{Index: &idx, Function: oaFunction{Arguments: c}}}}, nil), fail) {
					return
				}
			}
		}
	}
	fr := finishReason(rep.StopReason)
	if !s.event("", chunk(&oaMessage{}, &fr), fail) {
		return
	}
	u := rep.Usage
	final := oaCompletion{ID: "chatcmpl-fake", Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: "fake-model", Choices: []oaChoice{},
		Usage: &oaUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}}
	if !s.event("", final, fail) {
		return
	}
	s.raw("data: [DONE]\n\n")
}

// RetryAfter returns a Header map asking the client to wait d.
func RetryAfter(d time.Duration) map[string]string {
	return map[string]string{"retry-after-ms": strconv.FormatInt(d.Milliseconds(), 10), "retry-after": strconv.Itoa(int(d.Seconds()))}
}
