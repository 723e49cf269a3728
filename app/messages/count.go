package messages

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

// TokenCount is the answer to a count_tokens request.
type TokenCount struct {
	InputTokens int
	// Estimated is set when the upstream could not count: InputTokens is
	// then a token per four characters of the messages, system prompt and
	// tools as JSON, the rule of thumb providers give.
	Estimated bool
}

// CountOptions tune a count_tokens request.
type CountOptions struct {
	// NoURLFetch refuses images and documents named by URL, as
	// RunOptions.NoURLFetch does.
	NoURLFetch bool
}

// CountTokens counts the input tokens of a count_tokens request: the
// request is checked as a turn's would be, and the step its turn would
// first send the model (the history as the model reads it and the tool
// definitions threadbox gives, code execution's sub-tools in place of the
// code_execution tool) is counted by the upstream where it counts tokens.
// Where it cannot (ErrNoTokenCount, a model that is no TokenCounter, or an
// upstream without the endpoint, answering 404 or 405) the count is an
// estimate and says so. max_tokens is not part of a count request.
// Images and documents named by URL are fetched here and counted as
// data, as a turn sends them (no upstream fetches a user's URL), or
// refused under opts.NoURLFetch.
func (s *Service) CountTokens(ctx context.Context, req *wire.Request, opts CountOptions) (TokenCount, error) {
	if req.Model == "" {
		return TokenCount{}, fault.New(fault.Invalid, "model: Field required")
	}
	checked := *req
	checked.MaxTokens = 1
	p, err := plan(&checked, s.cfg.AllowedToolTypes)
	if err != nil {
		return TokenCount{}, err
	}
	if c, ok := s.model.(TokenCounter); ok {
		t := &turn{s: s, req: &checked, plan: p}
		inlined := checked
		inlined.Messages = cloneMessages(req.Messages)
		urls := s.cfg.URLs
		if opts.NoURLFetch {
			urls = sandboxURLs{}
		}
		if err := inlineSources(ctx, &inlined, urls); err != nil {
			return TokenCount{}, err
		}
		history, _, _ := stripProgrammatic(inlined.Messages)
		tools := t.toolDefinitions()
		step := StepRequest{
			Model: req.Model, System: req.System, Messages: readableHistory(upstreamHistory(history), tools),
			Tools: tools, ToolChoice: t.toolChoice(), Thinking: req.Thinking,
		}
		n, err := c.CountTokens(ctx, step)
		var up *UpstreamError
		switch {
		case err == nil:
			return TokenCount{InputTokens: n}, nil
		case errors.Is(err, ErrNoTokenCount), errors.As(err, &up) && (up.StatusCode == 404 || up.StatusCode == 405):
		default:
			return TokenCount{}, err
		}
	}
	return TokenCount{InputTokens: estimateTokens(req), Estimated: true}, nil
}

// estimateTokens is a token per four characters of the request's
// messages, system prompt and tools as compact JSON.
func estimateTokens(req *wire.Request) int {
	chars := 0
	add := func(v any) {
		b, err := json.Marshal(v)
		var buf bytes.Buffer
		if err == nil && json.Compact(&buf, b) == nil {
			chars += utf8.RuneCount(buf.Bytes())
		}
	}
	add(req.Messages)
	if len(req.System) > 0 {
		add(req.System)
	}
	if len(req.Tools) > 0 {
		add(req.Tools)
	}
	return (chars + 3) / 4
}
