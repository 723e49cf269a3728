package runner_test

import (
	"testing"

	"threadbox/app/messages"
	"threadbox/infra/llm/llmtest"
	"threadbox/infra/llm/runner"
	"threadbox/infra/llm/upstream"
)

// TestConformance runs the model-adapter suite against the offline runner.
// It has no upstream: it answers in-process from the code blocks of the
// prompt, so it is held to the providers' rules on the step requests it is
// handed, and what only an upstream does is out of its reach.
func TestConformance(t *testing.T) {
	llmtest.Run(t, llmtest.Row{
		New: func(upstream.Config) messages.Model { return runner.New() },
		Cannot: map[llmtest.Capability]string{
			llmtest.StartUsage:          "the runner counts no input tokens",
			llmtest.Upstream:            "the runner answers in-process: there is no upstream to fail, refuse or retry",
			llmtest.ClientTools:         "the runner only calls bash_code_execution, once for each code block of the prompt; it never calls a client's tool",
			llmtest.UpstreamPauseTurn:   "the runner never pauses by itself; the loop's own pause_turn is the loop_pause_turn case, which it passes",
			llmtest.MaxTokens:           "the runner's answers are short summaries it never cuts at max_tokens",
			llmtest.StopSequence:        "the runner's answers are summaries it never ends at a stop sequence",
			llmtest.UpstreamServerTools: "the runner has no upstream to run server tools of its own",
			llmtest.Thinking:            "the runner does not think",
			llmtest.ParallelCalls:       "the runner runs one code block per step, waiting for its result before the next",
			llmtest.SandboxTools:        "the runner runs code blocks through bash_code_execution only",
		},
	})
}
