package messages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"threadbox/app/messages/wire"
)

// Model is one language model behind the loop. It knows nothing of server
// tools: the loop sends it plain tool definitions and tool_use/tool_result
// history, and it answers with text, thinking and tool_use blocks.
type Model interface {
	// Step returns the assistant's next content blocks for the conversation.
	Step(ctx context.Context, req StepRequest) (*StepResult, error)
	// StreamStep is Step that reports the blocks as they arrive through
	// emit. An error returned by emit aborts the step and is returned.
	StreamStep(ctx context.Context, req StepRequest, emit func(StepEvent) error) (*StepResult, error)
}

// TokenCounter is a Model whose upstream counts a step's input tokens
// (Anthropic's count_tokens). A Model that wraps another forwards the
// call, returning ErrNoTokenCount when the one it wraps cannot count.
type TokenCounter interface {
	CountTokens(ctx context.Context, req StepRequest) (int, error)
}

// ErrNoTokenCount is a TokenCounter's answer when its upstream cannot
// count tokens.
var ErrNoTokenCount = errors.New("messages: the model upstream does not count tokens")

// StepRequest is the conversation sent to the model for one step. Messages
// hold only text, image, document, thinking, tool_use and tool_result blocks.
type StepRequest struct {
	Model         string
	MaxTokens     int
	System        json.RawMessage // a JSON string or an array of text blocks; may be empty
	Messages      []wire.Message
	Tools         []ToolDefinition
	ToolChoice    json.RawMessage
	Temperature   *float64
	TopP          *float64
	TopK          *int
	StopSequences []string
	Metadata      json.RawMessage
	Thinking      json.RawMessage
	Extra         map[string]json.RawMessage // other request fields, for Anthropic upstreams
}

// ToolDefinition is a tool as the model sees it.
type ToolDefinition struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	// Raw, when set, is the definition as the Anthropic API takes it: a
	// client's tool as sent, or the product's own tools encoded once.
	Raw json.RawMessage
	// Canonical says Raw is json.Marshal's own output (compact, with <, >
	// and & escaped), as the product's tools are: an encoder may copy it
	// into a json.Marshal-equal array without scanning it again.
	Canonical bool
}

// MarshalJSON encodes the definition as the Anthropic API takes it: Raw
// when set, else name, description and input_schema.
func (d ToolDefinition) MarshalJSON() ([]byte, error) {
	if len(d.Raw) > 0 {
		return d.Raw, nil
	}
	return json.Marshal(struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}{d.Name, d.Description, d.InputSchema})
}

// StepResult is the model's answer for one step.
type StepResult struct {
	Content      []wire.ContentBlock
	StopReason   string
	StopSequence *string
	Usage        wire.Usage
}

// StepEventKind says what a StepEvent reports.
type StepEventKind int

// The kinds of step events.
const (
	// StepBlockStart opens block Index; Block holds its type and, for
	// tool_use, id and name (input empty).
	StepBlockStart StepEventKind = iota + 1
	// StepBlockDelta extends block Index with Delta.
	StepBlockDelta
	// StepBlockStop closes block Index.
	StepBlockStop
	// StepStart says the upstream began its answer, before any block;
	// Usage holds the step's input tokens (and cache counts), and the
	// output tokens counted so far (Anthropic's usually 1), as the
	// upstream gives them there, as Anthropic's message_start does. An
	// adapter whose upstream counts them only at the end sends none.
	StepStart
)

// StepEvent is one streamed piece of a model step. Indexes count from 0
// within the step.
type StepEvent struct {
	Kind  StepEventKind
	Index int
	Block wire.ContentBlock
	Delta wire.BlockDelta
	Usage wire.Usage // StepStart's
	// More says the step's next event is already at hand (it came in the
	// same read from the upstream): the loop may hold this one and write
	// the two to the client together. An event without More is written
	// out, with any held before it, before the model reads on.
	More bool
}

// ToolCall is one sub-tool call to run in a container.
type ToolCall struct {
	ID          string // srvtoolu_ id
	Name        string // bash_code_execution or text_editor_code_execution
	Input       json.RawMessage
	ContainerID string // the container's storage id
	// ScopeID is the container's id as the client names it (the Files
	// API's scope_id); empty when the turn names none.
	ScopeID string
	// Env holds KEY=value pairs for every command the call runs (the
	// ANTHROPIC_* variables of the turn, RunOptions.Env).
	Env []string
	// Output, when set, takes the call's output while it runs ("stdout"
	// or "stderr", a chunk it must not retain): the turn asked for live
	// output. An executor that runs no command leaves it unused.
	Output func(stream string, chunk []byte)
	// CodeTools are the request's client tools as the code_execution
	// sub-tool's Python sees them (programmatic tool calling), and
	// CallerType the code-execution tool type that names their caller.
	CodeTools  []CodeTool
	CallerType string
	// Resume, when not nil, holds the client's results of the tool calls
	// the code_execution call ID is paused on: the paused cell goes on
	// with them, Input is not run anew.
	Resume []ToolAnswer
	// OrgID and UserID name who the turn runs for (RunOptions); a
	// web_fetch call is decided by that org's egress policy.
	OrgID, UserID string
	// WebFetch holds the request's web_fetch tool options for a web_fetch
	// call; nil for every other call.
	WebFetch *wire.WebFetchTool
}

// CodeTool is a client tool as code sees it: an async Python function
// named Name taking the properties of InputSchema. A tool not Allowed
// (its allowed_callers does not list the request's code-execution tool)
// raises an error when code calls it.
type CodeTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Allowed     bool            `json:"allowed"`
}

// ToolAnswer is the client's tool_result for a call code made.
type ToolAnswer struct {
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// ToolExecutor runs server sub-tool calls in a container's sandbox. Execute
// returns the result block's content; a tool that cannot run gives an error
// result (with Detail filled in), not an error. An error is returned only
// when ctx ends.
type ToolExecutor interface {
	Execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error)
}

// Sink receives the events of a turn as they happen. An error from Send
// (say, the client went away) stops the turn and is returned by Run.
type Sink interface {
	Send(ev wire.Event) error
}

// HoldingSink is a Sink that can write events in bursts: Hold writes ev
// without sending it on to the client yet, Flush sends everything held,
// and Send sends ev with everything held before it. The loop holds an
// event only when the next one is already at hand, and sends or flushes
// before anything that may wait (the model's next read, a tool call, the
// turn's end).
type HoldingSink interface {
	Sink
	Hold(ev wire.Event) error
	Flush() error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(wire.Event) error

// Send calls f.
func (f SinkFunc) Send(ev wire.Event) error { return f(ev) }

// ToolHook is called after each sub-tool call has run and its result block
// has been sent, so the workspace layer can capture artifacts.
type ToolHook func(ctx context.Context, call ToolCall, result *wire.ToolResult)

// ErrUpstreamUnavailable reports that the model's upstream could not be
// reached; the web layer answers 503.
var ErrUpstreamUnavailable = errors.New("model upstream unavailable")

// UpstreamError is an error answer of the model's upstream.
type UpstreamError struct {
	StatusCode int    // HTTP status of the upstream, 0 when it came mid-stream
	Type       string // Anthropic error type, e.g. "overloaded_error"
	Message    string
}

// Error describes the upstream failure.
func (e *UpstreamError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("model upstream: %d %s: %s", e.StatusCode, e.Type, e.Message)
	}
	return fmt.Sprintf("model upstream: %s: %s", e.Type, e.Message)
}
