// Package anthropic is the Model adapter for Anthropic-compatible upstreams,
// through the official Anthropic Go SDK. Requests are sent in the Messages
// wire format as the client wrote them (minus the product's own fields), so
// every field the upstream understands reaches it.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/upstream"
)

// Config configures the adapter. BaseURL is e.g. http://127.0.0.1:8080 (a trailing /v1 is ignored); empty means the SDK default.
type Config = upstream.Config

// Model asks an Anthropic-compatible upstream for steps. It implements
// messages.Model.
type Model struct {
	client sdk.Client
	send   *sender // the SDK's requests for steps, sent without it; nil: through it
	model  string
}

// New returns a Model using one HTTP client (and so one pool of kept-alive
// connections) for all requests.
func New(cfg Config) *Model {
	// threadbox registers no OpenTelemetry provider: the SDK's spans would
	// be built per call for nothing (a few % of a request's CPU).
	next, mw := upstream.Doer(cfg.Client()), upstream.Middleware(cfg.RetryWait())
	opts := []option.RequestOption{option.WithHTTPClient(next), option.WithMaxRetries(cfg.Retries()),
		option.WithMiddleware(mw), option.WithoutOpenTelemetry()}
	if cfg.BaseURL != "" {
		// The SDK adds v1/messages; accept a base URL given with /v1 too.
		base := strings.TrimSuffix(strings.TrimSuffix(cfg.BaseURL, "/"), "/v1")
		opts = append(opts, option.WithBaseURL(base+"/"))
	}
	if cfg.APIKey != "" {
		// Both header styles: Anthropic reads x-api-key, many compatible
		// servers read the bearer token.
		opts = append(opts, option.WithAPIKey(cfg.APIKey), option.WithHeader("x-api-key", cfg.APIKey))
	} else {
		opts = append(opts, option.WithAPIKey("none"))
	}
	return &Model{client: sdk.NewClient(opts...), send: newSender(opts, next, mw, cfg.Retries()), model: cfg.Model}
}

// body builds the upstream request body: the messages first, then the
// other fields in the order json.Marshal writes a map's keys.
func (m *Model) body(req messages.StepRequest, stream bool) ([]byte, error) {
	if plainStep(req) {
		return m.plainBody(req, stream)
	}
	return m.mapBody(req, stream)
}

// mapBody is body for any request, through a map of its fields.
func (m *Model) mapBody(req messages.StepRequest, stream bool) ([]byte, error) {
	out := map[string]any{}
	for k, v := range req.Extra {
		out[k] = v
	}
	model := upstream.ResolveModel(req.Model, m.model)
	out["model"] = model
	out["max_tokens"] = req.MaxTokens
	if len(req.System) > 0 {
		out["system"] = req.System
	}
	if len(req.Tools) > 0 {
		out["tools"] = req.Tools // messages.ToolDefinition encodes itself
	}
	set := func(k string, v json.RawMessage) {
		if len(v) > 0 {
			out[k] = v
		}
	}
	set("tool_choice", req.ToolChoice)
	set("metadata", req.Metadata)
	set("thinking", req.Thinking)
	upstream.PutSampling(out, req.Temperature, req.TopP, req.StopSequences, "stop_sequences")
	if req.TopK != nil {
		out["top_k"] = *req.TopK
	}
	if stream {
		out["stream"] = true
	} else {
		delete(out, "stream")
	}
	delete(out, "messages") // an Extra field cannot stand in for them
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("anthropic: encode request: %w", err)
	}
	// The history, the bulk of the body, is encoded on its own and put
	// first: json.Marshal would scan every block's encoding once more.
	msgs, err := wire.MarshalMessages(req.Messages)
	if err != nil {
		return nil, fmt.Errorf("anthropic: encode messages: %w", err)
	}
	body := make([]byte, 0, len(b)+len(msgs)+16)
	body = append(append(append(body, `{"messages":`...), msgs...), ',')
	return append(body, b[1:]...), nil // b is never empty: it has model and max_tokens
}

// plainStep reports whether req has none of the fields but the messages,
// the model, max_tokens, the system prompt and the tools: plainBody writes
// those without json.Marshal's map.
func plainStep(req messages.StepRequest) bool {
	return len(req.Extra) == 0 && len(req.ToolChoice) == 0 && len(req.Metadata) == 0 && len(req.Thinking) == 0 &&
		req.Temperature == nil && req.TopP == nil && req.TopK == nil && len(req.StopSequences) == 0
}

// plainBody is body for a plainStep request, byte for byte the same
// (TestPlainBodyIsBody).
func (m *Model) plainBody(req messages.StepRequest, stream bool) ([]byte, error) {
	msgs, err := wire.MarshalMessages(req.Messages)
	if err != nil {
		return nil, fmt.Errorf("anthropic: encode messages: %w", err)
	}
	model := upstream.ResolveModel(req.Model, m.model)
	name, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("anthropic: encode request: %w", err)
	}
	var system, tools []byte
	if len(req.System) > 0 {
		if system, err = json.Marshal(req.System); err != nil {
			return nil, fmt.Errorf("anthropic: encode request: %w", err)
		}
	}
	if len(req.Tools) > 0 {
		if tools, err = marshalTools(req.Tools); err != nil {
			return nil, fmt.Errorf("anthropic: encode request: %w", err)
		}
	}
	body := make([]byte, 0, len(msgs)+len(system)+len(tools)+len(name)+96)
	body = append(append(append(body, `{"messages":`...), msgs...), `,"max_tokens":`...)
	body = strconv.AppendInt(body, int64(req.MaxTokens), 10)
	body = append(append(body, `,"model":`...), name...)
	if stream {
		body = append(body, `,"stream":true`...)
	}
	if system != nil {
		body = append(append(body, `,"system":`...), system...)
	}
	if tools != nil {
		body = append(append(body, `,"tools":`...), tools...)
	}
	return append(body, '}'), nil
}

// marshalTools is json.Marshal(tools), byte for byte: each definition's
// own encoding (encoded once, or the client's as sent) is put in the array
// as it is when json.Marshal would leave it so (compact, with <, > and &
// escaped: a canonical definition's is, a client's is checked), without
// json.Marshal's scan of each; otherwise json.Marshal.
func marshalTools(tools []messages.ToolDefinition) ([]byte, error) {
	out := []byte{'['}
	for i, t := range tools {
		b, err := t.MarshalJSON()
		if err != nil || !(t.Canonical && len(t.Raw) > 0 || marshalsAsItself(b)) {
			return json.Marshal(tools)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

// marshalsAsItself reports whether json.Marshal would copy b, a valid
// encoding, unchanged: no space outside strings, nothing it escapes for
// HTML (<, >, &, U+2028, U+2029).
func marshalsAsItself(b []byte) bool {
	in, esc := false, false
	for i, c := range b {
		switch {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9):
			return false
		case in && esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return len(b) > 0
}

// nonStreamingTimeout bounds each attempt of a non-streamed step: what the
// SDK's Messages.New sets when max_tokens allows a non-streamed answer.
const nonStreamingTimeout = 10 * time.Minute

// Step asks the upstream for one message.
func (m *Model) Step(ctx context.Context, req messages.StepRequest) (*messages.StepResult, error) {
	body, err := m.body(req, false)
	if err != nil {
		return nil, err
	}
	// The SDK's request is sent, retried and its reply read, as
	// Messages.New does with the same ten-minute limit per attempt (by the
	// sender, or the SDK when there is none), and the body is handed over
	// as read (into raw): one json.Unmarshal decodes it into the loop's own
	// type, where the SDK would copy it into a json.Decoder first.
	raw, _, err := m.post(ctx, body, false)
	if err != nil {
		return nil, upstreamError(ctx, err, true)
	}
	// Its own decoder reads a reply of text blocks in one pass (once the
	// bytes are known to be JSON), json.Unmarshal's would skip over it first.
	var r wire.Response
	if json.Valid(raw) {
		err = r.UnmarshalJSON(raw)
	} else {
		err = json.Unmarshal(raw, &r) // for its error
	}
	if err != nil {
		return nil, upstreamError(ctx, fmt.Errorf("error parsing response json: %w", err), true)
	}
	return &messages.StepResult{Content: r.Content, StopReason: r.StopReason, StopSequence: r.StopSequence, Usage: r.Usage}, nil
}

// StreamStep asks the upstream for one message as a stream. Retries happen
// only before the first event; an error after it ends the step.
func (m *Model) StreamStep(ctx context.Context, req messages.StepRequest, emit func(messages.StepEvent) error) (*messages.StepResult, error) {
	body, err := m.body(req, true)
	if err != nil {
		return nil, err
	}
	// The SDK's request is sent and retried (by the sender, or the SDK)
	// and the SDK splits the event stream (as Messages.NewStreaming does);
	// each event is decoded once, into the loop's own type, not first into
	// the SDK's event union.
	_, raw, err := m.post(ctx, body, true)
	// The events decoded from one read of the upstream are emitted with
	// More set, but for the last: it is emitted, without More, before the
	// next read, which may wait. The client then gets a burst of events
	// the upstream sent together in one write, as a proxy copying the
	// upstream's reads would.
	var (
		pending *messages.StepEvent
		emitErr error
	)
	release := func() error {
		if pending == nil || emitErr != nil {
			return emitErr
		}
		ev := *pending
		pending = nil
		emitErr = emit(ev)
		return emitErr
	}
	if raw != nil && raw.Body != nil {
		if _, traced := raw.Body.(interface{ Unwrap() io.ReadCloser }); !traced {
			raw.Body = &beforeRead{ReadCloser: raw.Body, hook: release}
		}
	}
	stream := ssestream.NewStream[wire.Event](ssestream.NewDecoder(raw), err)
	defer stream.Close()
	res := &messages.StepResult{}
	var acc messages.Collector
	started, stopped := false, false
	for stream.Next() {
		ev := stream.Current()
		started = true
		if err := acc.Send(ev); err != nil {
			return nil, fmt.Errorf("anthropic: event: %w", err)
		}
		var out *messages.StepEvent
		switch ev.Type {
		case wire.EventMessageStart:
			if ev.Message != nil {
				res.Usage = ev.Message.Usage
			}
			// The step's input tokens, known at its start: the loop's
			// message_start carries them.
			out = &messages.StepEvent{Kind: messages.StepStart, Usage: res.Usage}
		case wire.EventContentBlockStart:
			out = &messages.StepEvent{Kind: messages.StepBlockStart, Index: ev.Index, Block: *ev.ContentBlock}
		case wire.EventContentBlockDelta:
			out = &messages.StepEvent{Kind: messages.StepBlockDelta, Index: ev.Index, Delta: *ev.Delta}
		case wire.EventContentBlockStop:
			out = &messages.StepEvent{Kind: messages.StepBlockStop, Index: ev.Index}
		case wire.EventMessageDelta:
			if ev.MessageDelta != nil {
				res.StopReason = ev.MessageDelta.StopReason
				res.StopSequence = ev.MessageDelta.StopSequence
			}
			if ev.Usage != nil {
				mergeDeltaUsage(&res.Usage, *ev.Usage)
			}
		case wire.EventMessageStop:
			stopped = true
		}
		if out != nil {
			if pending != nil {
				pending.More = true
				if err := release(); err != nil {
					return nil, err
				}
			}
			pending = out
		}
	}
	if err := release(); err != nil {
		return nil, err
	}
	if err := stream.Err(); err != nil {
		return nil, upstreamError(ctx, err, !started)
	}
	if !stopped {
		return nil, &messages.UpstreamError{Type: "api_error", Message: "The model upstream ended the stream early."}
	}
	res.Content = acc.Response().Content
	return res, nil
}

// post sends a step's body to the upstream's Messages endpoint: by the
// sender when there is one, else through the SDK. A non-streamed step's
// reply is read whole (raw), a streamed one's is handed over unread (res).
func (m *Model) post(ctx context.Context, body []byte, stream bool) (raw []byte, res *http.Response, err error) {
	if m.send != nil {
		return m.send.post(ctx, body, stream)
	}
	if stream {
		err = m.client.Post(ctx, "v1/messages", nil, &res, option.WithRequestBody("application/json", body))
	} else {
		err = m.client.Post(ctx, "v1/messages", body, &raw, option.WithRequestTimeout(nonStreamingTimeout))
	}
	if err != nil {
		// The SDK read and closed an error reply's body already.
		return nil, nil, err
	}
	return raw, res, nil
}

// upstreamError maps an SDK error. beforeStream tells whether the upstream
// had answered with an HTTP status (as opposed to failing mid-stream).
func upstreamError(ctx context.Context, err error, beforeStream bool) error {
	if ctx.Err() != nil {
		return fmt.Errorf("anthropic: %w", ctx.Err())
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		status := apiErr.StatusCode
		if !beforeStream {
			status = 0
		}
		typ := string(apiErr.Type())
		if typ == "" {
			typ = "api_error"
		}
		msg := apiErr.Message
		if msg == "" {
			msg = http.StatusText(apiErr.StatusCode)
		}
		return &messages.UpstreamError{StatusCode: status, Type: typ, Message: msg}
	}
	if !beforeStream {
		return &messages.UpstreamError{Type: "api_error", Message: "The model upstream stream failed."}
	}
	return fmt.Errorf("anthropic: %w: %v", messages.ErrUpstreamUnavailable, err)
}

// beforeRead is a body that calls hook before each read; a hook's error
// is the read's.
type beforeRead struct {
	io.ReadCloser
	hook func() error
}

func (b *beforeRead) Read(p []byte) (int, error) {
	if err := b.hook(); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// mergeDeltaUsage takes the counts of a message_delta's usage into u, the
// usage of the message_start. The delta's counts are the message's totals
// so far: its output tokens always, and the input, cache and server tool
// counts where it gives them (Anthropic's API does; a compatible upstream
// may give them in message_start alone).
func mergeDeltaUsage(u *wire.Usage, d wire.Usage) {
	u.OutputTokens = d.OutputTokens
	if d.InputTokens > 0 {
		u.InputTokens = d.InputTokens
	}
	if d.CacheCreationInputTokens > 0 {
		u.CacheCreationInputTokens = d.CacheCreationInputTokens
	}
	if d.CacheReadInputTokens > 0 {
		u.CacheReadInputTokens = d.CacheReadInputTokens
	}
	if d.ServerToolUse != nil {
		u.ServerToolUse = d.ServerToolUse
	}
}
