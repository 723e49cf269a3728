package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// The calls the official SDKs and the tools built on them make beside
// Messages: the models list and the token count (docs/messages.md).

// modelView is a model in Anthropic's shape (the SDKs' ModelInfo): the
// lifecycle fields of a model threadbox serves as long as it is configured,
// and what threadbox provides with it.
type modelView struct {
	Type         string       `json:"type"`
	ID           string       `json:"id"`
	DisplayName  string       `json:"display_name"`
	CreatedAt    time.Time    `json:"created_at"`
	Lifecycle    string       `json:"lifecycle"`
	Line         *string      `json:"line"`
	DeprecatedAt *time.Time   `json:"deprecated_at"`
	RetiresAt    *time.Time   `json:"retires_at"`
	Capabilities capabilities `json:"capabilities"`
}

// support is a capability's entry: whether threadbox provides it.
type support struct {
	Supported bool `json:"supported"`
}

// codeExecutionSupport is server_tools.code_execution, with the tool
// versions a request may name (a threadbox field beside the SDK's).
type codeExecutionSupport struct {
	Supported bool     `json:"supported"`
	Versions  []string `json:"versions"`
}

// capabilities are a model's capabilities as the SDKs type them, every key
// present. They say what a request through threadbox gets, whatever the
// upstream model could do on its own: the server tools and programmatic
// tool calling that threadbox runs, Message Batches, and the image and PDF
// blocks it takes; what it does not provide (citations, context management,
// effort, structured outputs, thinking, web search) is false
// (docs/messages.md, "Models").
type capabilities struct {
	Batch             support `json:"batch"`
	Citations         support `json:"citations"`
	CodeExecution     support `json:"code_execution"`
	ContextManagement struct {
		ClearThinking20251015 support `json:"clear_thinking_20251015"`
		ClearToolUses20250919 support `json:"clear_tool_uses_20250919"`
		Compact20260112       support `json:"compact_20260112"`
		Supported             bool    `json:"supported"`
	} `json:"context_management"`
	Effort struct {
		High      support `json:"high"`
		Low       support `json:"low"`
		Max       support `json:"max"`
		Medium    support `json:"medium"`
		Supported bool    `json:"supported"`
		Xhigh     support `json:"xhigh"`
	} `json:"effort"`
	ImageInput  support `json:"image_input"`
	PDFInput    support `json:"pdf_input"`
	ServerTools struct {
		CodeExecution codeExecutionSupport `json:"code_execution"`
		Supported     bool                 `json:"supported"`
		WebSearch     support              `json:"web_search"`
	} `json:"server_tools"`
	StructuredOutputs support `json:"structured_outputs"`
	Thinking          struct {
		Supported bool `json:"supported"`
		Types     struct {
			Adaptive     support `json:"adaptive"`
			BetweenTools support `json:"between_tools"`
			Disabled     support `json:"disabled"`
			Enabled      support `json:"enabled"`
		} `json:"types"`
	} `json:"thinking"`
}

// codeExecutionVersions are the code-execution tool types a request may
// name (app/messages).
var codeExecutionVersions = []string{
	wire.ToolTypeCodeExecution2505, wire.ToolTypeCodeExecution2508,
	wire.ToolTypeCodeExecution2601, wire.ToolTypeCodeExecution2605,
}

// served returns what threadbox provides with every model it serves.
func served() capabilities {
	var c capabilities
	c.Batch.Supported = true
	c.CodeExecution.Supported = true
	c.ImageInput.Supported = true
	c.PDFInput.Supported = true
	c.ServerTools.Supported = true
	c.ServerTools.CodeExecution = codeExecutionSupport{Supported: true, Versions: codeExecutionVersions}
	return c
}

// models lists what "model" may name here: the configured model and
// "default", which means it.
func (s *Server) models() []modelView {
	var out []modelView
	view := func(id, name string) modelView {
		return modelView{Type: "model", ID: id, DisplayName: name, CreatedAt: s.started, Lifecycle: "active", Capabilities: served()}
	}
	if t := s.svc.Turns; t != nil && t.DefaultModel() != "" && t.DefaultModel() != "default" {
		out = append(out, view(t.DefaultModel(), t.DefaultModel()))
	}
	return append(out, view("default", "The server's configured model"))
}

// listModels is GET /api/gpt/v1/models, a page at a time as the Anthropic
// API pages it (limit 1-1000, default 20; after_id or before_id).
func (s *Server) listModels(c *fiber.Ctx) error {
	limit, err := queryLimit(c, 20, 1000)
	if err != nil {
		return err
	}
	id := func(m modelView) string { return m.ID }
	page, more, err := pageSpan(c, s.models(), limit, id, "model")
	if err != nil {
		return err
	}
	return c.JSON(idPageOf(page, more, id))
}

// getModel is GET /api/gpt/v1/models/{id}.
func (s *Server) getModel(c *fiber.Ctx) error {
	id := c.Params("id")
	for _, m := range s.models() {
		if m.ID == id {
			return c.JSON(m)
		}
	}
	return fault.Errorf(fault.NotFound, "model: %s", id)
}

// countTokens is POST /api/gpt/v1/messages/count_tokens. The request is
// checked as a Messages request (max_tokens aside) and counted by the
// model upstream where it counts (app/messages CountTokens); where it
// cannot, the answer is an estimate and says so (estimated: true and the
// header threadbox-token-count: estimate).
func (s *Server) countTokens(c *fiber.Ctx) error {
	if s.svc.Counter == nil {
		return fault.New(fault.Unavailable, "no model is configured to count tokens")
	}
	req, err := parseMessagesRequest(c)
	if err != nil {
		return err
	}
	// A sandbox token's request fetches no URL, as in its turns
	// (app/turns Prepare).
	n, err := s.svc.Counter.CountTokens(c.UserContext(), req, messages.CountOptions{NoURLFetch: principal(c).Kind == user.SandboxToken})
	if err != nil {
		return s.turnError(c, "count_tokens", err)
	}
	if n.Estimated {
		c.Set("threadbox-token-count", "estimate")
		return c.JSON(fiber.Map{"input_tokens": n.InputTokens, "estimated": true})
	}
	return c.JSON(fiber.Map{"input_tokens": n.InputTokens})
}
