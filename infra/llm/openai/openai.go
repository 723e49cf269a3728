// Package openai is the Model adapter for OpenAI-compatible chat-completions
// servers with tool calling (vLLM, Ollama, llama.cpp server), through the
// official OpenAI Go SDK. Tools become function tools; tool_calls come back
// as tool_use blocks, and tool_use/tool_result history becomes assistant
// tool_calls and tool messages.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/upstream"
)

// Config configures the adapter. BaseURL is the API root including /v1, e.g. http://127.0.0.1:8000/v1.
type Config = upstream.Config

// Model asks an OpenAI-compatible server for steps. It implements
// messages.Model.
type Model struct {
	client sdk.Client
	model  string
}

// New returns a Model using one HTTP client (one pool of kept-alive
// connections) for all requests.
func New(cfg Config) *Model {
	key := cfg.APIKey
	if key == "" {
		key = "none"
	}
	opts := []option.RequestOption{option.WithHTTPClient(upstream.Doer(cfg.Client())), option.WithMaxRetries(cfg.Retries()),
		option.WithMiddleware(upstream.Middleware(cfg.RetryWait())), option.WithAPIKey(key)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(strings.TrimSuffix(cfg.BaseURL, "/")+"/"))
	}
	return &Model{client: sdk.NewClient(opts...), model: cfg.Model}
}

// Wire shapes of the request.
type (
	chatMessage struct {
		Role       string     `json:"role"`
		Content    any        `json:"content,omitempty"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	toolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function functionCall `json:"function"`
	}
	functionCall struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	contentPart struct {
		Type     string    `json:"type"`
		Text     string    `json:"text,omitempty"`
		ImageURL *imageURL `json:"image_url,omitempty"`
	}
	imageURL struct {
		URL string `json:"url"`
	}
	function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
)

// body builds the chat-completions request body.
func (m *Model) body(req messages.StepRequest, stream bool) ([]byte, error) {
	model := upstream.ResolveModel(req.Model, m.model)
	out := map[string]any{"model": model, "max_tokens": req.MaxTokens}
	var msgs []chatMessage
	if sys := systemText(req.System); sys != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: sys})
	}
	for _, msg := range req.Messages {
		cm, err := convertMessage(msg)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, cm...)
	}
	out["messages"] = msgs
	var tools []tool
	for _, t := range req.Tools {
		schema := t.InputSchema
		if len(schema) == 0 {
			continue // a typed server tool of another vendor: nothing to offer
		}
		tools = append(tools, tool{Type: "function", Function: function{Name: t.Name, Description: t.Description, Parameters: schema}})
	}
	if len(tools) > 0 {
		out["tools"] = tools
		if tc := toolChoice(req.ToolChoice); tc != nil {
			out["tool_choice"] = tc
		}
	}
	upstream.PutSampling(out, req.Temperature, req.TopP, req.StopSequences, "stop")
	if stream {
		out["stream"] = true
		out["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("openai: encode request: %w", err)
	}
	return b, nil
}

// systemText flattens the system prompt (a string or text blocks).
func systemText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	text, _ := flatText(raw, "\n\n")
	return text
}

// toolChoice maps an Anthropic tool_choice to the OpenAI one.
func toolChoice(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &tc) != nil {
		return nil
	}
	switch tc.Type {
	case "auto":
		return "auto"
	case "any":
		return "required"
	case "none":
		return "none"
	case "tool":
		return map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
	}
	return nil
}

// resultText flattens a tool_result's content (a string or blocks).
func resultText(raw json.RawMessage) string {
	if text, ok := flatText(raw, "\n"); ok {
		return text
	}
	return string(raw)
}

// flatText is the text of raw, a string or content blocks: the string, or
// the text blocks' text joined by sep; ok is false when raw is neither.
func flatText(raw json.RawMessage, sep string) (text string, ok bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var blocks []wire.ContentBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return "", false
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == wire.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, sep), true
}

// convertMessage turns one Anthropic message into chat messages.
func convertMessage(msg wire.Message) ([]chatMessage, error) {
	if msg.Role == wire.RoleAssistant {
		var text []string
		var calls []toolCall
		for _, b := range msg.Content {
			switch b.Type {
			case wire.BlockText:
				text = append(text, b.Text)
			case wire.BlockToolUse:
				args := string(b.Input)
				if args == "" {
					args = "{}"
				}
				calls = append(calls, toolCall{ID: b.ID, Type: "function", Function: functionCall{Name: b.Name, Arguments: args}})
			}
		}
		cm := chatMessage{Role: "assistant", ToolCalls: calls}
		if t := strings.Join(text, ""); t != "" || len(calls) == 0 {
			cm.Content = t
		}
		return []chatMessage{cm}, nil
	}
	var out []chatMessage
	var parts []contentPart
	for _, b := range msg.Content {
		switch b.Type {
		case wire.BlockToolResult:
			text := resultText(b.Content)
			if b.IsError {
				text = "Error: " + text
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: text})
		case wire.BlockText:
			parts = append(parts, contentPart{Type: "text", Text: b.Text})
		case wire.BlockImage:
			u, err := imageData(b.Raw)
			if err != nil {
				return nil, err
			}
			parts = append(parts, contentPart{Type: "image_url", ImageURL: &imageURL{URL: u}})
		}
	}
	switch {
	case len(parts) == 1 && parts[0].Type == "text":
		out = append(out, chatMessage{Role: "user", Content: parts[0].Text})
	case len(parts) > 0:
		out = append(out, chatMessage{Role: "user", Content: parts})
	}
	return out, nil
}

// imageData returns an image block as a data: URL. Only base64 sources are
// sent: the messages service fetched every url source and checked every
// source type, so anything else never came from it, and an image_url
// holding a URL would have the model server fetch it from the operator's
// network. Members are read by their exact names.
func imageData(raw json.RawMessage) (string, error) {
	var block map[string]json.RawMessage
	var src map[string]json.RawMessage
	var typ, mediaType, data string
	if json.Unmarshal(raw, &block) != nil || json.Unmarshal(block["source"], &src) != nil ||
		json.Unmarshal(src["type"], &typ) != nil || typ != messages.SourceBase64 ||
		json.Unmarshal(src["media_type"], &mediaType) != nil || !strings.HasPrefix(mediaType, "image/") || strings.ContainsAny(mediaType, ";,") ||
		json.Unmarshal(src["data"], &data) != nil || data == "" {
		return "", errors.New("openai: an image reaches an OpenAI-compatible server only as base64 data")
	}
	return "data:" + mediaType + ";base64," + data, nil
}

// stopReason maps a finish reason to a stop reason. An answer cut at
// max_tokens says so even in the middle of a call (whose arguments are then
// incomplete: the loop must not run it); calls make tool_use whatever the
// finish reason (some servers say "stop" after them); and tool_calls naming
// no call (a server whose tool parser failed) is an end of turn, since
// tool_use promises a tool_use block.
func stopReason(finish string, calledTools bool) string {
	switch {
	case finish == "length":
		return wire.StopMaxTokens
	case finish == "content_filter":
		return wire.StopRefusal
	case calledTools:
		return wire.StopToolUse
	}
	return wire.StopEndTurn
}

// toolInput returns the arguments as a JSON object.
func toolInput(args string) json.RawMessage {
	args = strings.TrimSpace(args)
	if args == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(args)) && strings.HasPrefix(args, "{") {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}

// Step asks the server for one completion.
func (m *Model) Step(ctx context.Context, req messages.StepRequest) (*messages.StepResult, error) {
	body, err := m.body(req, false)
	if err != nil {
		return nil, err
	}
	cc, err := m.client.Chat.Completions.New(ctx, sdk.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
	if err != nil {
		return nil, upstreamError(ctx, err, true)
	}
	res := &messages.StepResult{Usage: wire.Usage{InputTokens: int(cc.Usage.PromptTokens), OutputTokens: int(cc.Usage.CompletionTokens)}}
	if len(cc.Choices) == 0 {
		return nil, &messages.UpstreamError{Type: "api_error", Message: "The model upstream returned no choices."}
	}
	ch := cc.Choices[0]
	if ch.Message.Content != "" {
		res.Content = append(res.Content, wire.ContentBlock{Type: wire.BlockText, Text: ch.Message.Content})
	}
	for i, tc := range ch.Message.ToolCalls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", i)
		}
		res.Content = append(res.Content, wire.ContentBlock{Type: wire.BlockToolUse, ID: id, Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
	}
	res.StopReason = stopReason(ch.FinishReason, len(ch.Message.ToolCalls) > 0)
	return res, nil
}

// StreamStep asks the server for one completion as a stream. Retries happen
// only before the first chunk; an error after it ends the step.
func (m *Model) StreamStep(ctx context.Context, req messages.StepRequest, emit func(messages.StepEvent) error) (*messages.StepResult, error) {
	body, err := m.body(req, true)
	if err != nil {
		return nil, err
	}
	stream := m.client.Chat.Completions.NewStreaming(ctx, sdk.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
	defer stream.Close()
	s := &streamState{emit: emit, res: &messages.StepResult{}, open: -1, tools: map[int64]int{}}
	started := false
	finish := ""
	for stream.Next() {
		started = true
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			s.res.Usage.InputTokens = int(chunk.Usage.PromptTokens)
			s.res.Usage.OutputTokens = int(chunk.Usage.CompletionTokens)
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		ch := chunk.Choices[0]
		if ch.Delta.Content != "" {
			if err := s.text(ch.Delta.Content); err != nil {
				return nil, err
			}
		}
		for _, tc := range ch.Delta.ToolCalls {
			if err := s.toolCall(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments); err != nil {
				return nil, err
			}
		}
		if ch.FinishReason != "" {
			finish = ch.FinishReason
		}
	}
	if err := stream.Err(); err != nil {
		return nil, upstreamError(ctx, err, !started)
	}
	if finish == "" {
		return nil, &messages.UpstreamError{Type: "api_error", Message: "The model upstream ended the stream early."}
	}
	if err := s.close(); err != nil {
		return nil, err
	}
	for i := range s.res.Content {
		if b := &s.res.Content[i]; b.Type == wire.BlockToolUse {
			b.Input = toolInput(s.args[i].String())
		}
	}
	s.res.StopReason = stopReason(finish, len(s.tools) > 0)
	return s.res, nil
}

// streamState turns chat chunks into content blocks.
type streamState struct {
	emit  func(messages.StepEvent) error
	res   *messages.StepResult
	open  int           // index of the open block, -1 when none
	tools map[int64]int // tool call index -> block index
	args  map[int]*strings.Builder
}

func (s *streamState) close() error {
	if s.open < 0 {
		return nil
	}
	i := s.open
	s.open = -1
	return s.emit(messages.StepEvent{Kind: messages.StepBlockStop, Index: i})
}

func (s *streamState) start(b wire.ContentBlock) error {
	if err := s.close(); err != nil {
		return err
	}
	s.res.Content = append(s.res.Content, b)
	s.open = len(s.res.Content) - 1
	return s.emit(messages.StepEvent{Kind: messages.StepBlockStart, Index: s.open, Block: b})
}

func (s *streamState) text(t string) error {
	if s.open < 0 || s.res.Content[s.open].Type != wire.BlockText {
		if err := s.start(wire.ContentBlock{Type: wire.BlockText}); err != nil {
			return err
		}
	}
	s.res.Content[s.open].Text += t
	return s.emit(messages.StepEvent{Kind: messages.StepBlockDelta, Index: s.open, Delta: wire.BlockDelta{Type: wire.DeltaText, Text: t}})
}

func (s *streamState) toolCall(idx int64, id, name, args string) error {
	bi, ok := s.tools[idx]
	if !ok {
		if id == "" {
			id = fmt.Sprintf("call_%d", idx)
		}
		if err := s.start(wire.ContentBlock{Type: wire.BlockToolUse, ID: id, Name: name}); err != nil {
			return err
		}
		bi = s.open
		s.tools[idx] = bi
		if s.args == nil {
			s.args = map[int]*strings.Builder{}
		}
		s.args[bi] = &strings.Builder{}
	}
	if args == "" {
		return nil
	}
	s.args[bi].WriteString(args)
	return s.emit(messages.StepEvent{Kind: messages.StepBlockDelta, Index: bi, Delta: wire.BlockDelta{Type: wire.DeltaInputJSON, PartialJSON: args}})
}

// upstreamError maps an SDK error; beforeStream tells whether no chunk had
// arrived yet.
func upstreamError(ctx context.Context, err error, beforeStream bool) error {
	if ctx.Err() != nil {
		return fmt.Errorf("openai: %w", ctx.Err())
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		typ := apiErr.Type
		switch {
		case apiErr.StatusCode == 429:
			typ = "rate_limit_error"
		case apiErr.StatusCode >= 500:
			typ = "api_error"
		case typ == "":
			typ = "invalid_request_error"
		}
		msg := apiErr.Message
		if msg == "" {
			// The body was not an OpenAI error (a proxy's page, a plain
			// 404 of a wrong base URL): the client gets the status's
			// text, never an error without a message.
			msg = http.StatusText(apiErr.StatusCode)
		}
		return &messages.UpstreamError{StatusCode: apiErr.StatusCode, Type: typ, Message: msg}
	}
	if !beforeStream {
		msg := "The model upstream stream failed."
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			msg = strings.TrimPrefix(se.Message, "received error while streaming: ")
		}
		return &messages.UpstreamError{Type: "api_error", Message: msg}
	}
	return fmt.Errorf("openai: %w: %v", messages.ErrUpstreamUnavailable, err)
}
