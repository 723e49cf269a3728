package fakeupstream

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The fake is as strict as the providers it stands for: a request they
// document as refused is answered with their 400 invalid_request_error, so
// a test fails when threadbox sends one. The rules, from each provider's
// documentation of its Messages or Chat Completions API:
//
// Anthropic — the first message is the user's; a text block is never empty
// and no message is without content; a request with tool_use or
// tool_result blocks defines tools; a tool's allowed_callers names only
// "direct" or a code-execution tool the request defines (a model behind
// threadbox gets plain tools, so never a code caller); a tool_use with a
// caller names a server_tool_use of the request; each tool_use of an
// assistant message
// is answered by a tool_result at the start of the very next message, a
// user message; each tool_result answers a tool_use of the assistant
// message just before it.
//
// OpenAI — a request with tool_calls or tool messages defines tools; an
// assistant message with tool_calls is followed by one tool message per
// call; a tool message answers a call of the assistant message before it.

// Refusal returns why a provider speaking format f would refuse a request
// with this body (400 invalid_request_error), or "" when it would accept
// it. It is the check the server applies to every request it receives,
// for models that have no upstream to send the request to (the runner).
func Refusal(f Format, body json.RawMessage) string {
	if f == OpenAI {
		return refuseOpenAI(body)
	}
	return refuseAnthropic(body)
}

// anthropicBody is the part of a Messages request the rules read.
type anthropicBody struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []json.RawMessage `json:"tools"`
}

type anthropicBlock struct {
	Type      string  `json:"type"`
	Text      *string `json:"text"`
	ID        string  `json:"id"`
	ToolUseID string  `json:"tool_use_id"`
	Caller    *struct {
		Type   string `json:"type"`
		ToolID string `json:"tool_id"`
	} `json:"caller"`
}

// anthropicTool is the part of a tool definition the rules read.
type anthropicTool struct {
	Type           string   `json:"type"`
	AllowedCallers []string `json:"allowed_callers"`
}

// refuseAnthropic returns why Anthropic would refuse the request, or "".
func refuseAnthropic(raw json.RawMessage) string {
	var body anthropicBody
	if err := json.Unmarshal(raw, &body); err != nil {
		return "invalid request body: " + err.Error()
	}
	if len(body.Messages) == 0 {
		return "messages: at least one message is required"
	}
	if body.Messages[0].Role != "user" {
		return "messages: first message must use the \"user\" role"
	}
	types := map[string]bool{}
	var tools []anthropicTool
	for _, raw := range body.Tools {
		var t anthropicTool
		_ = json.Unmarshal(raw, &t)
		types[t.Type] = true
		tools = append(tools, t)
	}
	for i, t := range tools {
		for _, c := range t.AllowedCallers {
			if c != "direct" && !types[c] {
				return fmt.Sprintf("tools.%d.allowed_callers: %s is not a tool of this request", i, c)
			}
		}
	}
	serverUses := map[string]bool{}
	hasTools := false
	var pending []string // tool_use ids the next message must answer
	for i, m := range body.Messages {
		var blocks []anthropicBlock
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			if s == "" {
				return fmt.Sprintf("messages.%d: content must be non-empty", i)
			}
			blocks = []anthropicBlock{{Type: "text", Text: &s}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return fmt.Sprintf("messages.%d.content: %v", i, err)
		}
		if len(blocks) == 0 {
			return fmt.Sprintf("messages.%d: all messages must have non-empty content", i)
		}
		answered := map[string]bool{}
		leading := true
		var uses []string
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return fmt.Sprintf("messages.%d.content.%d.text: text content blocks must be non-empty", i, j)
				}
				leading = false
			case "server_tool_use":
				serverUses[b.ID] = true
				leading = false
			case "tool_use":
				hasTools = true
				if b.Caller != nil && b.Caller.Type != "direct" && !serverUses[b.Caller.ToolID] {
					return fmt.Sprintf("messages.%d.content.%d.caller: tool_id %s names no server_tool_use of this conversation", i, j, b.Caller.ToolID)
				}
				if m.Role != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
				}
				uses = append(uses, b.ID)
				leading = false
			case "tool_result":
				hasTools = true
				if m.Role != "user" {
					return fmt.Sprintf("messages.%d.content.%d: tool_result blocks are only allowed in user messages", i, j)
				}
				if !contains(pending, b.ToolUseID) {
					return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				if !leading {
					return fmt.Sprintf("messages.%d: `tool_result` blocks must come first in the message, before any other content", i)
				}
				answered[b.ToolUseID] = true
			default:
				leading = false
			}
		}
		for _, id := range pending {
			if !answered[id] {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, id)
			}
		}
		pending = uses
	}
	if len(pending) > 0 {
		// The last message may end in tool calls only as a prefill of the
		// assistant's turn, which Anthropic refuses for tool_use.
		return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", len(body.Messages)-1, strings.Join(pending, ", "))
	}
	if hasTools && len(body.Tools) == 0 {
		return "Requests which include `tool_use` or `tool_result` blocks must define tools."
	}
	return ""
}

// openAIBody is the part of a chat-completions request the rules read.
type openAIBody struct {
	Messages []struct {
		Role      string `json:"role"`
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	Tools []json.RawMessage `json:"tools"`
}

// refuseOpenAI returns why an OpenAI-compatible server would refuse the
// request, or "".
func refuseOpenAI(raw json.RawMessage) string {
	var body openAIBody
	if err := json.Unmarshal(raw, &body); err != nil {
		return "invalid request body: " + err.Error()
	}
	hasTools := false
	var pending []string // tool_call ids still to be answered
	var calls []string   // the ids of the last assistant message's calls
	for i, m := range body.Messages {
		if m.Role == "tool" {
			hasTools = true
			if !contains(calls, m.ToolCallID) {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages.[%d])", i)
			}
			pending = remove(pending, m.ToolCallID)
			continue
		}
		if len(pending) > 0 {
			return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
		}
		calls = nil
		if m.Role == "assistant" {
			for _, c := range m.ToolCalls {
				hasTools = true
				calls = append(calls, c.ID)
			}
			pending = append([]string(nil), calls...)
		}
	}
	if len(pending) > 0 {
		return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
	}
	if hasTools && len(body.Tools) == 0 {
		return "Invalid parameter: 'tool_calls' and 'tool' messages require 'tools' to be specified."
	}
	return ""
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func remove(ids []string, id string) []string {
	out := ids[:0]
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}
