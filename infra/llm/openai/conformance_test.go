package openai_test

import (
	"testing"

	"threadbox/app/messages"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/llmtest"
	"threadbox/infra/llm/openai"
	"threadbox/infra/llm/upstream"
)

// TestConformance runs the model-adapter suite against the OpenAI
// chat-completions adapter.
func TestConformance(t *testing.T) {
	llmtest.Run(t, llmtest.Row{
		Format: fakeupstream.OpenAI,
		New: func(cfg upstream.Config) messages.Model {
			cfg.BaseURL += "/v1" // the adapter takes the API root
			return openai.New(cfg)
		},
		Cannot: map[llmtest.Capability]string{
			llmtest.StartUsage: "chat completions streams give the prompt's tokens only in their last chunk (stream_options.include_usage), " +
				"so a stream's message_start says 0 input tokens and message_delta has the count",
			llmtest.UpstreamPauseTurn: "chat completions has no pause_turn: its finish reasons are stop, length, " +
				"tool_calls, content_filter and function_call, and such servers run no tools of their own that could pause",
			llmtest.StopSequence:        "chat completions reports a stop sequence as finish_reason stop, without saying which one matched",
			llmtest.UpstreamServerTools: "chat-completions servers run no typed server tools of their own; the adapter offers only function tools",
			llmtest.Thinking:            "chat completions has no thinking blocks: the adapter sends none and reads none (servers' reasoning_content is not mapped)",
		},
	})
}
