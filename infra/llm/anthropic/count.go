package anthropic

import (
	"context"
	"encoding/json"
	"fmt"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/upstream"
)

// CountTokens asks the upstream's token count endpoint
// (POST /v1/messages/count_tokens) how many input tokens the step would
// take: its messages, system prompt, tools, tool_choice and thinking, the
// fields that endpoint reads.
func (m *Model) CountTokens(ctx context.Context, req messages.StepRequest) (int, error) {
	model := upstream.ResolveModel(req.Model, m.model)
	out := map[string]any{"model": model}
	msgs, err := wire.MarshalMessages(req.Messages)
	if err != nil {
		return 0, fmt.Errorf("anthropic: encode messages: %w", err)
	}
	out["messages"] = json.RawMessage(msgs)
	if len(req.System) > 0 {
		out["system"] = req.System
	}
	if len(req.Tools) > 0 {
		out["tools"] = req.Tools
	}
	if len(req.ToolChoice) > 0 {
		out["tool_choice"] = req.ToolChoice
	}
	if len(req.Thinking) > 0 {
		out["thinking"] = req.Thinking
	}
	body, err := json.Marshal(out)
	if err != nil {
		return 0, fmt.Errorf("anthropic: encode count request: %w", err)
	}
	var res struct {
		InputTokens *int `json:"input_tokens"`
	}
	if err := m.client.Post(ctx, "v1/messages/count_tokens", body, &res); err != nil {
		return 0, upstreamError(ctx, err, true)
	}
	if res.InputTokens == nil {
		return 0, &messages.UpstreamError{StatusCode: 502, Type: "api_error", Message: "The model upstream's token count has no input_tokens."}
	}
	return *res.InputTokens, nil
}
