package web

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// The calls the official SDKs and the tools built on them make beside
// Messages: the models list and the token count (docs/messages.md).

// modelView is a model in Anthropic's shape.
type modelView struct {
	Type        string    `json:"type"`
	ID          string    `json:"id"`
	DisplayName string    `json:"display_name"`
	CreatedAt   time.Time `json:"created_at"`
}

// modelList is GET /v1/models's page.
type modelList struct {
	Data    []modelView `json:"data"`
	HasMore bool        `json:"has_more"`
	FirstID *string     `json:"first_id"`
	LastID  *string     `json:"last_id"`
}

// models lists what "model" may name here: the configured model and
// "default", which means it.
func (s *Server) models() []modelView {
	var out []modelView
	if t := s.svc.Turns; t != nil && t.DefaultModel() != "" && t.DefaultModel() != "default" {
		out = append(out, modelView{Type: "model", ID: t.DefaultModel(), DisplayName: t.DefaultModel(), CreatedAt: s.started})
	}
	return append(out, modelView{Type: "model", ID: "default", DisplayName: "The server's configured model", CreatedAt: s.started})
}

// listModels is GET /api/gpt/v1/models.
func (s *Server) listModels(c *fiber.Ctx) error {
	ms := s.models()
	first, last := ms[0].ID, ms[len(ms)-1].ID
	return c.JSON(modelList{Data: ms, FirstID: &first, LastID: &last})
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

// countRequest is the part of a count_tokens body that is counted.
type countRequest struct {
	Model    string          `json:"model"`
	Messages json.RawMessage `json:"messages"`
	System   json.RawMessage `json:"system"`
	Tools    json.RawMessage `json:"tools"`
}

// countTokens is POST /api/gpt/v1/messages/count_tokens. No upstream
// counts for threadbox, so the answer is an estimate — a token per four
// characters of the messages, system prompt and tools as JSON, the rule of
// thumb providers give — and says so (estimated: true and the header
// threadbox-token-count: estimate).
func (s *Server) countTokens(c *fiber.Ctx) error {
	b, err := body(c, maxJSONBody)
	if err != nil {
		return err
	}
	var req countRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return fault.Errorf(fault.Invalid, "invalid request body: %s", jsonErr(err))
	}
	if req.Model == "" {
		return fault.New(fault.Invalid, "model: Field required")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(req.Messages, &msgs); err != nil || len(msgs) == 0 {
		return fault.New(fault.Invalid, "messages: at least one message is required")
	}
	for i, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			return fault.Errorf(fault.Invalid, "messages.%d.role: must be user or assistant", i)
		}
		if len(m.Content) == 0 {
			return fault.Errorf(fault.Invalid, "messages.%d.content: Field required", i)
		}
	}
	chars := 0
	for _, part := range []json.RawMessage{req.Messages, req.System, req.Tools} {
		var buf bytes.Buffer
		if len(part) > 0 && json.Compact(&buf, part) == nil {
			chars += utf8.RuneCount(buf.Bytes())
		}
	}
	c.Set("threadbox-token-count", "estimate")
	return c.JSON(fiber.Map{"input_tokens": (chars + 3) / 4, "estimated": true})
}
