package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"threadbox/app/messages/wire"
	"threadbox/domain/file"
)

// upstreamHistory translates a history that may hold server_tool_use and
// result blocks into plain tool_use/tool_result pairs a model understands:
// an assistant message is split after each run of result blocks, and the
// results become a user message of tool_result blocks, merged at the start
// of the user message that follows (where providers want a call's result).
// Consecutive assistant messages are merged; two user messages of the
// client are not (each stays the prompt it was). container_upload blocks
// become a text note naming the file's sandbox path.
func upstreamHistory(in []wire.Message) []wire.Message {
	var out []wire.Message
	synthetic := false // the last message holds only results made here
	add := func(role string, results bool, blocks ...wire.ContentBlock) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role && (role == wire.RoleAssistant || results || synthetic) {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			synthetic = synthetic && results
			return
		}
		out = append(out, wire.Message{Role: role, Content: blocks})
		synthetic = results
	}
	for _, m := range in {
		var cur []wire.ContentBlock
		flushAs := m.Role
		for _, b := range m.Content {
			switch b.Type {
			case wire.BlockServerToolUse:
				// threadbox's own calls reach the model as the tool_use
				// blocks it made; the upstream's own (web search) go
				// back as they came, as Anthropic documents.
				if IsOwnServerTool(b.Name) {
					b.Type = wire.BlockToolUse
					b.Raw = nil
				}
				cur = append(cur, b)
			case wire.BlockBashResult, wire.BlockTextEditorResult, wire.BlockSandboxResult, wire.BlockCodeExecutionResult, wire.BlockWebFetchResult:
				add(flushAs, false, cur...)
				cur = nil
				if b.Result != nil {
					add(wire.RoleUser, true, upstreamResult(b.ToolUseID, b.Result))
				}
			case wire.BlockContainerUpload:
				p, err := uploadPath(b.FileID)
				if err != nil {
					p = b.FileID
				}
				cur = append(cur, wire.ContentBlock{Type: wire.BlockText, Text: fmt.Sprintf("[The file %s is available in the container at %s]", b.FileID, p)})
			case wire.BlockText:
				if b.Text != "" { // upstreams refuse empty text blocks
					cur = append(cur, b)
				}
			default:
				cur = append(cur, b)
			}
		}
		add(flushAs, false, cur...)
	}
	return out
}

// readableHistory keeps a history valid for a request that does not offer
// the tools it used: providers refuse tool_use and tool_result blocks whose
// tool the request does not define (Anthropic: "Requests which include
// tool_use or tool_result blocks must define tools"; OpenAI-compatible
// servers likewise for tool_calls and tool messages). Each such call and
// its result become text the model can still read; calls of offered tools
// stay as they are.
func readableHistory(in []wire.Message, tools []ToolDefinition) []wire.Message {
	offered := make(map[string]bool, len(tools))
	for _, t := range tools {
		offered[t.Name] = true
	}
	names := map[string]string{} // ids of calls of tools not offered → tool name
	for _, m := range in {
		for _, b := range m.Content {
			if b.Type == wire.BlockToolUse && !offered[b.Name] {
				names[b.ID] = b.Name
			}
		}
	}
	if len(names) == 0 {
		return in
	}
	out := make([]wire.Message, len(in))
	for i, m := range in {
		blocks := make([]wire.ContentBlock, 0, len(m.Content))
		for _, b := range m.Content {
			switch name, textual := names[b.ID]; {
			case b.Type == wire.BlockToolUse && textual:
				blocks = append(blocks, wire.ContentBlock{Type: wire.BlockText, Text: fmt.Sprintf("[Called the tool %s (no longer offered) with input %s]", name, compactJSON(b.Input))})
			case b.Type == wire.BlockToolResult && names[b.ToolUseID] != "":
				blocks = append(blocks, wire.ContentBlock{Type: wire.BlockText, Text: fmt.Sprintf("[Result of %s: %s]", names[b.ToolUseID], resultText(b))})
			default:
				blocks = append(blocks, b)
			}
		}
		out[i] = wire.Message{Role: m.Role, Content: blocks}
	}
	return out
}

// compactJSON returns raw without insignificant space, or as is.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// resultText is a tool_result's content as text: a JSON string's value,
// the text of text blocks, or the raw JSON.
func resultText(b wire.ContentBlock) string {
	prefix := ""
	if b.IsError {
		prefix = "error: "
	}
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return prefix + s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(b.Content, &parts) == nil {
		var texts []string
		for _, p := range parts {
			if p.Type == wire.BlockText {
				texts = append(texts, p.Text)
			}
		}
		return prefix + strings.Join(texts, "\n")
	}
	return prefix + compactJSON(b.Content)
}

// upstreamResult renders a sub-tool result as the tool_result the model reads.
func upstreamResult(id string, r *wire.ToolResult) wire.ContentBlock {
	text, err := json.Marshal(r)
	if err != nil {
		text = []byte(`{"type":"error"}`)
	}
	content, _ := json.Marshal(string(text))
	return wire.ContentBlock{Type: wire.BlockToolResult, ToolUseID: id, Content: content, IsError: r.IsError()}
}

// uploadPath decodes a file id (base64url of the absolute sandbox path).
func uploadPath(fileID string) (string, error) {
	p, err := file.DecodeID(fileID)
	if err != nil {
		return "", fmt.Errorf("not a file id of this server: %w", err)
	}
	return p, nil
}

// SubToolDefinitions returns the two code-execution sub-tools as the model
// sees them.
func SubToolDefinitions() []ToolDefinition { return slices.Clone(subTools) }

// subTools are encoded once (Raw), not per request.
var subTools = encoded([]ToolDefinition{
	{
		Name: wire.SubToolBash,
		Description: "Run a shell command in the sandbox. Each call runs in a new bash shell in /home/agent/workspace; " +
			"files persist between calls, cd and environment variables do not. Files written to $OUTPUT_DIR are saved " +
			"to /mnt/user-data/outputs/ as downloadable deliverables. Uploaded files are in /mnt/user-data/uploads/ (read-only). " +
			"No internet access.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"command":{"type":"string","description":"The shell command to run."},` +
			`"timeout":{"type":"integer","description":"Timeout in seconds (default 60).","minimum":1},` +
			`"restart":{"type":"boolean","description":"Restart the sandbox before running the command."}},` +
			`"required":["command"]}`),
	},
	{
		Name: wire.SubToolTextEditor,
		Description: "View, create and edit files in the sandbox. Relative paths resolve in /home/agent/workspace. " +
			"view shows a file (optionally view_range [start, end], 1-based, -1 = end of file) or lists a directory; " +
			"create writes file_text; str_replace replaces old_str, which must occur exactly once, with new_str; " +
			"insert adds insert_text after line insert_line (0 = start of file).",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"command":{"type":"string","enum":["view","create","str_replace","insert"]},` +
			`"path":{"type":"string","description":"File or directory path."},` +
			`"view_range":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2},` +
			`"file_text":{"type":"string"},"old_str":{"type":"string"},"new_str":{"type":"string"},` +
			`"insert_line":{"type":"integer","minimum":0},"insert_text":{"type":"string"}},` +
			`"required":["command","path"]}`),
	},
})

// encoded sets the Raw form of the product's own tool definitions.
func encoded(defs []ToolDefinition) []ToolDefinition {
	for i, d := range defs {
		raw, err := d.MarshalJSON()
		if err != nil {
			panic("messages: tool definition " + d.Name + ": " + err.Error()) // a constant: caught by any test
		}
		defs[i].Raw, defs[i].Canonical = raw, true // json.Marshal's output
	}
	return defs
}

// Collector is a Sink that builds the complete response from the events of
// a turn, for non-streaming requests.
type Collector struct {
	resp    wire.Response
	partial map[int]*strings.Builder
}

// Send folds one event into the response.
func (c *Collector) Send(ev wire.Event) error {
	switch ev.Type {
	case wire.EventMessageStart:
		if ev.Message != nil {
			c.resp = *ev.Message
			c.resp.Content = []wire.ContentBlock{}
		}
	case wire.EventContentBlockStart:
		if ev.ContentBlock == nil {
			return errors.New("messages: content_block_start without block")
		}
		for len(c.resp.Content) <= ev.Index {
			c.resp.Content = append(c.resp.Content, wire.ContentBlock{})
		}
		c.resp.Content[ev.Index] = *ev.ContentBlock
	case wire.EventContentBlockDelta:
		if ev.Delta == nil || ev.Index >= len(c.resp.Content) {
			return errors.New("messages: delta for an unknown block")
		}
		b := &c.resp.Content[ev.Index]
		switch ev.Delta.Type {
		case wire.DeltaText:
			b.Text += ev.Delta.Text
		case wire.DeltaThinking:
			b.Thinking += ev.Delta.Thinking
		case wire.DeltaSignature:
			b.Signature += ev.Delta.Signature
		case wire.DeltaInputJSON:
			if c.partial == nil {
				c.partial = map[int]*strings.Builder{}
			}
			sb := c.partial[ev.Index]
			if sb == nil {
				sb = &strings.Builder{}
				c.partial[ev.Index] = sb
			}
			sb.WriteString(ev.Delta.PartialJSON)
		}
	case wire.EventContentBlockStop:
		if sb := c.partial[ev.Index]; sb != nil && ev.Index < len(c.resp.Content) {
			if s := strings.TrimSpace(sb.String()); s != "" {
				c.resp.Content[ev.Index].Input = json.RawMessage(s)
			}
			delete(c.partial, ev.Index)
		}
	case wire.EventMessageDelta:
		if ev.MessageDelta != nil {
			c.resp.StopReason = ev.MessageDelta.StopReason
			c.resp.StopSequence = ev.MessageDelta.StopSequence
			c.resp.Container = ev.MessageDelta.Container
		}
		if ev.Usage != nil {
			c.resp.Usage = *ev.Usage
		}
	}
	return nil
}

// Response returns the response built so far.
func (c *Collector) Response() *wire.Response {
	r := c.resp
	return &r
}
