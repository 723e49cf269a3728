package anthropic_test

import (
	"testing"

	"threadbox/app/messages"
	"threadbox/infra/llm/anthropic"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/llmtest"
	"threadbox/infra/llm/upstream"
)

// TestConformance runs the model-adapter suite against the Anthropic
// adapter, which can do everything the suite asks.
func TestConformance(t *testing.T) {
	llmtest.Run(t, llmtest.Row{
		Format: fakeupstream.Anthropic,
		New:    func(cfg upstream.Config) messages.Model { return anthropic.New(cfg) },
	})
}
