// Package wire is the JSON codec of the Anthropic Messages API's wire
// format as threadbox speaks it: the request (decoded in one pass that also
// checks it, unknown fields kept and passed on), messages and content
// blocks of every type the product knows (others kept as they came), the
// tool results of the code-execution and sandbox_v1 tools, the response and
// its stream events, threadbox's live output event among them. It knows
// nothing of the tool loop (app/messages), which uses its types under the
// same names.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"threadbox/domain/jsonfield"
)

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Stop reasons of a turn.
const (
	StopEndTurn   = "end_turn"
	StopToolUse   = "tool_use"
	StopMaxTokens = "max_tokens"
	StopSequence  = "stop_sequence"
	StopPauseTurn = "pause_turn"
	StopRefusal   = "refusal"
)

// Content block types this package understands. Any other type is kept as
// raw JSON and passed on untouched.
const (
	BlockText                 = "text"
	BlockThinking             = "thinking"
	BlockRedactedThinking     = "redacted_thinking"
	BlockToolUse              = "tool_use"
	BlockToolResult           = "tool_result"
	BlockServerToolUse        = "server_tool_use"
	BlockBashResult           = "bash_code_execution_tool_result"
	BlockTextEditorResult     = "text_editor_code_execution_tool_result"
	BlockContainerUpload      = "container_upload"
	BlockImage                = "image"
	BlockDocument             = "document"
	ResultBash                = "bash_code_execution_result"
	ResultBashError           = "bash_code_execution_tool_result_error"
	ResultBashOutput          = "bash_code_execution_output"
	ResultEditorView          = "text_editor_code_execution_view_result"
	ResultEditorCreate        = "text_editor_code_execution_create_result"
	ResultEditorStrReplace    = "text_editor_code_execution_str_replace_result"
	ResultEditorError         = "text_editor_code_execution_tool_result_error"
	SubToolBash               = "bash_code_execution"
	SubToolTextEditor         = "text_editor_code_execution"
	ToolTypeCodeExecutionV1   = "code_execution_v1"
	ToolTypeCodeExecution2505 = "code_execution_20250522"
	ToolTypeCodeExecution2508 = "code_execution_20250825"
	ToolTypeCodeExecution2601 = "code_execution_20260120"
	ToolTypeCodeExecution2605 = "code_execution_20260521"
	ToolTypeSandboxV1         = "sandbox_v1"
	// ToolTypeCustom is the explicit type of a client tool.
	ToolTypeCustom = "custom"
)

// Error codes of sub-tool error blocks (docs/api.md).
const (
	CodeUnavailable           = "unavailable"
	CodeExecutionTimeExceeded = "execution_time_exceeded"
	CodeInvalidToolInput      = "invalid_tool_input"
	CodeTooManyRequests       = "too_many_requests"
	CodeOutputFileTooLarge    = "output_file_too_large"
	CodeFileNotFound          = "file_not_found"
)

// Request is the body of POST /v1/messages. Fields the product does not
// interpret are kept in Extra and passed on to the model.
type Request struct {
	Model         string          `json:"model"`
	MaxTokens     int             `json:"max_tokens"`
	Messages      []Message       `json:"messages"`
	System        json.RawMessage `json:"system,omitempty"` // a string or an array of text blocks
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    json.RawMessage `json:"tool_choice,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Container     *ContainerParam `json:"container,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	TopK          *int            `json:"top_k,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	Thinking      json.RawMessage `json:"thinking,omitempty"`
	// Extra holds every other top-level field, passed on to Anthropic
	// upstreams as is.
	Extra map[string]json.RawMessage `json:"-"`
}

var requestFields = map[string]bool{
	"model": true, "max_tokens": true, "messages": true, "system": true, "tools": true,
	"tool_choice": true, "stream": true, "container": true, "temperature": true, "top_p": true,
	"top_k": true, "stop_sequences": true, "metadata": true, "thinking": true,
}

// UnmarshalJSON decodes a request, keeping unknown fields in Extra. The
// messages, the bulk of a request, are decoded in the request's own pass
// (wireMessage), and the unknown fields are found by a scan of the
// top-level keys rather than a second decode: a long history is read a
// few times, not a dozen.
//
// A request of the common shape (model, max_tokens, stream and messages of
// text) is read from one scan of its members once it is known to be JSON
// (decode.go); any other through encoding/json.
func (r *Request) UnmarshalJSON(data []byte) error {
	if json.Valid(data) {
		if q, ok := quickRequest(data); ok {
			*r = q
			return nil
		}
	}
	return r.decode(data)
}

// decode is UnmarshalJSON through encoding/json. A value of the wrong
// type is a *jsonfield.FieldError naming it by its path in the request.
func (r *Request) decode(data []byte) error {
	type plain Request
	var p struct {
		plain
		Messages []wireMessage `json:"messages"`
	}
	if err := jsonfield.Unmarshal(data, &p); err != nil {
		return err
	}
	if p.Messages != nil {
		p.plain.Messages = make([]Message, len(p.Messages))
		for i, m := range p.Messages {
			p.plain.Messages[i] = Message{Role: m.Role, Content: m.Content}
		}
	}
	var ferr error
	objectMembers(data, func(k string, v []byte) {
		if requestFields[k] {
			return
		}
		// encoding/json matched it to a field regardless of case ("Model"
		// set the model); the Messages API's names are case-sensitive.
		for f := range requestFields {
			if ferr == nil && strings.EqualFold(k, f) {
				ferr = fmt.Errorf("unknown field %q: field names are case-sensitive (did you mean %q?)", k, f)
			}
		}
		if p.Extra == nil {
			p.Extra = map[string]json.RawMessage{}
		}
		p.Extra[k] = append(json.RawMessage(nil), v...)
	})
	if ferr != nil {
		return ferr
	}
	*r = Request(p.plain)
	return nil
}

// objectMembers calls fn with each member of the JSON object data, in
// order: its key (unescaped) and its value as written. data must be valid
// JSON, as json.Unmarshal checked; anything but an object has no members.
func objectMembers(data []byte, fn func(key string, value []byte)) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return
	}
	for i++; ; {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return // '}' (or invalid)
		}
		end := skipString(data, i)
		rawKey := data[i:end]
		key, known := memberNames[string(rawKey[1:len(rawKey)-1])]
		if !known {
			key = string(rawKey[1 : len(rawKey)-1])
		}
		if bytes.IndexByte(rawKey, '\\') >= 0 || !utf8.Valid(rawKey) {
			// Escapes, and invalid UTF-8 (U+FFFD, as json.Unmarshal reads it).
			if json.Unmarshal(rawKey, &key) != nil {
				return
			}
		}
		i = skipSpace(data, end) + 1 // past ':'
		i = skipSpace(data, i)
		start := i
		i = skipValue(data, i)
		fn(key, data[start:i])
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ',' {
			return
		}
		i++
	}
}

// arrayElements yields each element of the JSON array data, in order, as
// written. data must be valid JSON, as json.Unmarshal checked, and start
// with '['.
func arrayElements(data []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for i := skipSpace(data, 1); i < len(data) && data[i] != ']'; {
			end := skipValue(data, i)
			if !yield(data[i:end]) {
				return
			}
			if i = skipSpace(data, end); i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
	}
}

// memberNames holds the names of the members the decoders look for, so
// that objectMembers hands them over without a copy of each.
var memberNames = func() map[string]string {
	m := map[string]string{"role": "role"}
	for _, names := range [][]string{blockKeys, responseKeys, usageKeys} {
		for _, n := range names {
			m[n] = n
		}
	}
	for n := range requestFields {
		m[n] = n
	}
	return m
}()

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at i.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// skipValue returns the index just past the value that starts at i.
func skipValue(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case '"':
			i = skipString(data, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the object around a literal
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

// MarshalJSON encodes a request with its Extra fields.
func (r Request) MarshalJSON() ([]byte, error) {
	type plain Request
	b, err := json.Marshal(plain(r))
	if err != nil || len(r.Extra) == 0 {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	for k, v := range r.Extra {
		if _, known := all[k]; !known {
			all[k] = v
		}
	}
	return json.Marshal(all)
}

// ContainerParam is the request's container: a string id or an object with
// an optional id and skills.
type ContainerParam struct {
	ID     string       `json:"id,omitempty"`
	Skills []SkillParam `json:"skills,omitempty"`
}

// SkillParam names a skill to load into the container.
type SkillParam struct {
	Type    string `json:"type"`
	SkillID string `json:"skill_id"`
	Version string `json:"version,omitempty"`
}

// UnmarshalJSON accepts a string id or an object.
func (c *ContainerParam) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) > 0 && data[0] == '"':
		return json.Unmarshal(data, &c.ID)
	case len(data) > 0 && data[0] != '{' && string(data) != "null":
		return &jsonfield.FieldError{Want: "a string or an object"}
	}
	type plain ContainerParam
	var p plain
	if err := jsonfield.Unmarshal(data, &p); err != nil {
		return err
	}
	*c = ContainerParam(p)
	return nil
}

// Message is one turn of the conversation. Content is a string or an array
// of blocks on the wire; it is always decoded into blocks.
type Message struct {
	Role    string         `json:"role"`
	Content []ContentBlock `json:"content"`
}

// UnmarshalJSON accepts string content as a single text block.
func (m *Message) UnmarshalJSON(data []byte) error {
	var w wireMessage
	if err := jsonfield.Unmarshal(data, &w); err != nil {
		return err
	}
	m.Role, m.Content = w.Role, w.Content
	return nil
}

// MarshalMessages encodes msgs as json.Marshal does (but for HTML
// escaping), without json.Marshal's second scan of every block's encoding:
// the history goes upstream on every step of a turn.
func MarshalMessages(msgs []Message) ([]byte, error) {
	size := 2
	for _, m := range msgs {
		size += 64
		for _, b := range m.Content {
			size += 96 + len(b.Text) + len(b.Raw) + len(b.Input) + len(b.Thinking) + len(b.Data) + len(b.Citations)
		}
	}
	buf := make([]byte, 0, size+size/8) // room for escapes
	buf = append(buf, '[')
	for i, m := range msgs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(appendString(append(buf, `{"role":`...), m.Role), `,"content":`...)
		if m.Content == nil {
			buf = append(buf, "null}"...)
			continue
		}
		buf = append(buf, '[')
		for j, b := range m.Content {
			if j > 0 {
				buf = append(buf, ',')
			}
			enc, err := b.MarshalJSON()
			if err != nil {
				return nil, err
			}
			buf = append(buf, enc...)
		}
		buf = append(buf, "]}"...)
	}
	return append(buf, ']'), nil
}

// wireMessage is a message as decoded: content may be a string.
type wireMessage struct {
	Role    string      `json:"role"`
	Content wireContent `json:"content"`
}

// wireContent is a message's content: an array of blocks, or a string that
// stands for one text block.
type wireContent []ContentBlock

func (c *wireContent) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) == 0 || string(data) == "null":
		*c = nil
	case data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*c = wireContent{{Type: BlockText, Text: s}}
	case data[0] == '[':
		// The request's decode checked the whole body, so the array is
		// split here and each block decoded on its own: json.Unmarshal of
		// the array would check and scan it twice more.
		var blocks []ContentBlock
		for elem := range arrayElements(data) {
			var b ContentBlock
			if err := b.UnmarshalJSON(elem); err != nil {
				return jsonfield.Under(strconv.Itoa(len(blocks)), err) // the block's index
			}
			blocks = append(blocks, b)
		}
		if blocks == nil {
			blocks = []ContentBlock{}
		}
		*c = blocks
	default:
		return &jsonfield.FieldError{Want: "a string or an array"}
	}
	return nil
}

// Tool is one entry of the request's tools: a client tool (name,
// description, input_schema) or a typed server tool (type, name).
type Tool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// AllowedCallers says who may call a client tool: "direct" (the
	// model, the default when empty) and code-execution tool types
	// (programmatic tool calling from the sandbox's Python).
	AllowedCallers []string `json:"allowed_callers,omitempty"`
	// Raw is the tool exactly as the client sent it.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON keeps the raw tool beside the decoded fields.
func (t *Tool) UnmarshalJSON(data []byte) error {
	type plain Tool
	var p plain
	if err := jsonfield.Unmarshal(data, &p); err != nil {
		return err
	}
	*t = Tool(p)
	t.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// MarshalJSON writes the raw tool when there is one.
func (t Tool) MarshalJSON() ([]byte, error) {
	if len(t.Raw) > 0 {
		return t.Raw, nil
	}
	type plain Tool
	return json.Marshal(plain(t))
}

// ContentBlock is one block of a message. Only the fields of its Type are
// meaningful; blocks of unknown types keep their JSON in Raw.
type ContentBlock struct {
	Type string

	Text      string          // text
	Citations json.RawMessage // text, optional

	Thinking  string // thinking
	Signature string // thinking
	Data      string // redacted_thinking

	ID    string          // tool_use, server_tool_use
	Name  string          // tool_use, server_tool_use
	Input json.RawMessage // tool_use, server_tool_use
	// Caller is who made a tool_use: nil for the model itself ("direct"),
	// or the code execution call whose Python called the client's tool
	// (programmatic tool calling).
	Caller *Caller

	ToolUseID string          // tool_result, *_tool_result
	Content   json.RawMessage // tool_result: string or blocks
	IsError   bool            // tool_result
	Result    *ToolResult     // bash/text-editor result blocks

	FileID string // container_upload

	// CacheControl is the block's prompt-caching breakpoint
	// ({"type": "ephemeral", "ttl"?}) on text, tool_use and tool_result
	// blocks, passed on to the model as the client set it.
	CacheControl json.RawMessage

	// Raw is the block as received, used for types not listed above and
	// re-emitted unchanged.
	Raw json.RawMessage
}

// MarshalJSON writes the block in the shape of its type.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case BlockText:
		if len(b.Citations) == 0 && len(b.CacheControl) == 0 {
			return appendBlock(make([]byte, 0, len(b.Text)+32), &b)
		}
		return json.Marshal(struct {
			Type         string          `json:"type"`
			Text         string          `json:"text"`
			Citations    json.RawMessage `json:"citations,omitempty"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.Text, b.Citations, b.CacheControl})
	case BlockThinking:
		return json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	case BlockRedactedThinking:
		return json.Marshal(struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}{b.Type, b.Data})
	case BlockToolUse, BlockServerToolUse:
		in := b.Input
		if len(bytes.TrimSpace(in)) == 0 {
			in = json.RawMessage(`{}`)
		}
		return json.Marshal(struct {
			Type         string          `json:"type"`
			ID           string          `json:"id"`
			Name         string          `json:"name"`
			Input        json.RawMessage `json:"input"`
			Caller       *Caller         `json:"caller,omitempty"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.ID, b.Name, in, b.Caller, b.CacheControl})
	case BlockToolResult:
		return json.Marshal(struct {
			Type         string          `json:"type"`
			ToolUseID    string          `json:"tool_use_id"`
			Content      json.RawMessage `json:"content,omitempty"`
			IsError      bool            `json:"is_error,omitempty"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.ToolUseID, b.Content, b.IsError, b.CacheControl})
	case BlockBashResult, BlockTextEditorResult, BlockSandboxResult, BlockCodeExecutionResult:
		if b.Result == nil {
			return nil, fmt.Errorf("messages: %s block without result", b.Type)
		}
		return json.Marshal(struct {
			Type      string      `json:"type"`
			ToolUseID string      `json:"tool_use_id"`
			Content   *ToolResult `json:"content"`
		}{b.Type, b.ToolUseID, b.Result})
	case BlockWebFetchResult:
		if b.Result == nil {
			return nil, fmt.Errorf("messages: %s block without result", b.Type)
		}
		caller := b.Caller
		if caller == nil {
			caller = &Caller{Type: CallerDirect}
		}
		return json.Marshal(struct {
			Type      string      `json:"type"`
			ToolUseID string      `json:"tool_use_id"`
			Content   *ToolResult `json:"content"`
			Caller    *Caller     `json:"caller"`
		}{b.Type, b.ToolUseID, b.Result, caller})
	case BlockContainerUpload:
		return json.Marshal(struct {
			Type   string `json:"type"`
			FileID string `json:"file_id"`
		}{b.Type, b.FileID})
	}
	if len(b.Raw) > 0 {
		return b.Raw, nil
	}
	return json.Marshal(struct {
		Type string `json:"type"`
	}{b.Type})
}

// UnmarshalJSON decodes a block of any type; a plain text block without a
// second look (decode.go).
func (b *ContentBlock) UnmarshalJSON(data []byte) error {
	if quickTextBlock(data, b) {
		return nil
	}
	return b.decode(data)
}

// decode is UnmarshalJSON through encoding/json.
func (b *ContentBlock) decode(data []byte) error {
	var aux struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Citations json.RawMessage `json:"citations"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
		FileID    string          `json:"file_id"`
		Caller    *Caller         `json:"caller"`
		// CacheControl is kept on the blocks that take it.
		CacheControl json.RawMessage `json:"cache_control"`
	}
	if err := jsonfield.Unmarshal(data, &aux); err != nil {
		return err
	}
	if aux.Type == "" {
		return jsonfield.Required("type")
	}
	*b = ContentBlock{
		Type: aux.Type, Text: aux.Text, Thinking: aux.Thinking, Signature: aux.Signature, Data: aux.Data,
		ID: aux.ID, Name: aux.Name, ToolUseID: aux.ToolUseID, IsError: aux.IsError, FileID: aux.FileID,
		Raw: append(json.RawMessage(nil), data...),
	}
	if aux.Type == BlockToolUse && aux.Caller != nil {
		b.Caller = aux.Caller
	}
	if len(aux.Citations) > 0 && string(aux.Citations) != "null" {
		b.Citations = aux.Citations
	}
	if len(aux.Input) > 0 && string(aux.Input) != "null" {
		b.Input = aux.Input
	}
	if takesCacheControl(aux.Type) && len(aux.CacheControl) > 0 && string(aux.CacheControl) != "null" {
		b.CacheControl = aux.CacheControl
	}
	switch aux.Type {
	case BlockWebFetchResult, BlockSandboxResult, BlockBashResult, BlockTextEditorResult, BlockCodeExecutionResult:
		if isNull(bytes.TrimSpace(aux.Content)) || len(bytes.TrimSpace(aux.Content)) == 0 {
			return jsonfield.Required("content")
		}
		r, err := resultOf(aux.Type, aux.Content)
		if err != nil {
			return contentError(aux.Type, err)
		}
		b.Result = r
	default:
		if len(aux.Content) > 0 && string(aux.Content) != "null" {
			b.Content = aux.Content
		}
	}
	return nil
}

// resultTypes are the types of result a server tool's result block of
// each type may hold; a sandbox_tool_result also holds any body of its
// tool's own.
var resultTypes = map[string][]string{
	BlockBashResult:          {ResultBash, ResultBashError},
	BlockTextEditorResult:    {ResultEditorView, ResultEditorCreate, ResultEditorStrReplace, ResultEditorError},
	BlockCodeExecutionResult: {ResultCodeExecution, ResultCodeExecutionError},
	BlockWebFetchResult:      {ResultWebFetch, ResultWebFetchError},
}

// resultOf decodes the content of a result block of type typ, refusing a
// result of a type such a block does not hold.
func resultOf(typ string, content json.RawMessage) (*ToolResult, error) {
	switch typ {
	case BlockSandboxResult:
		return sandboxResultOf(content)
	case BlockWebFetchResult:
		return webFetchResultOf(content)
	}
	var r ToolResult
	if err := jsonfield.Unmarshal(content, &r); err != nil {
		return nil, err
	}
	if !slices.Contains(resultTypes[typ], r.Type) {
		return nil, resultTypeError(typ)
	}
	return &r, nil
}

// resultTypeError is the error of a result of a type that a result block
// of type typ does not hold, at the result's type.
func resultTypeError(typ string) *jsonfield.FieldError {
	want := resultTypes[typ]
	quoted := make([]string, len(want))
	for i, w := range want {
		quoted[i] = strconv.Quote(w)
	}
	last := len(quoted) - 1
	return &jsonfield.FieldError{Path: "type", Problem: "must be " + strings.Join(quoted[:last], ", ") + " or " + quoted[last]}
}

// contentError is the error of a result block of type typ whose content
// decoding refused with err: a value of the wrong type named by its path
// from the block, any other error with the block's type.
func contentError(typ string, err error) error {
	if _, ok := errors.AsType[*jsonfield.FieldError](err); ok {
		return jsonfield.Under("content", err)
	}
	return fmt.Errorf("messages: %s content: %w", typ, err)
}

// takesCacheControl reports whether blocks of type typ keep a
// cache_control breakpoint (ContentBlock.CacheControl); any other block
// the client sends keeps it in Raw, or loses it with the rest of its
// fields when threadbox writes it anew.
func takesCacheControl(typ string) bool {
	return typ == BlockText || typ == BlockToolUse || typ == BlockToolResult
}

// Caller is the caller of a tool_use block (programmatic tool calling):
// {"type": "code_execution_20260120", "tool_id": "srvtoolu_…"}, the
// code-execution tool type and the id of the server_tool_use whose code
// made the call.
type Caller struct {
	Type   string `json:"type"`
	ToolID string `json:"tool_id,omitempty"`
}

// CallerDirect is the caller of a tool the model calls itself.
const CallerDirect = "direct"

// FromCode reports whether the block is a tool call made by code (a
// caller other than the model itself).
func (b *ContentBlock) FromCode() bool { return b.Caller != nil && b.Caller.Type != CallerDirect }

// PendingCall is a client tool call that a code execution cell made and
// waits on (programmatic tool calling): the tool_use block the client
// gets, with a Caller naming the cell's call.
type PendingCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// OutputFile is an entry of a bash result's content: a file the command left
// in $OUTPUT_DIR.
type OutputFile struct {
	Type   string `json:"type"`
	FileID string `json:"file_id"`
}

// ErrorDetail is this product's extension of error blocks.
type ErrorDetail struct {
	Code        string `json:"code"`
	Explanation string `json:"explanation"`
}

// ToolResult is the content of a bash or text-editor result block. Only the
// fields of its Type are written.
type ToolResult struct {
	Type string

	// bash_code_execution_result
	Stdout     string
	Stderr     string
	ReturnCode int
	Files      []OutputFile

	// text_editor_code_execution_view_result
	FileType    string
	FileContent string
	NumLines    int
	StartLine   int
	TotalLines  int

	// text_editor_code_execution_create_result
	IsFileUpdate bool

	// text_editor_code_execution_str_replace_result
	OldStart int
	OldLines int
	NewStart int
	NewLines int
	Lines    []string

	// *_tool_result_error
	ErrorCode string
	Detail    *ErrorDetail

	// Body is the whole content object of a sandbox_v1 result
	// (ResultSandboxBody), written as is.
	Body json.RawMessage

	// Pending, never written, holds the client tool calls a code
	// execution cell is paused on: the call has no result yet; the
	// client's tool_results in a later request resume it.
	Pending []PendingCall
	// PausedUntil, never written, is when a paused cell stops waiting for
	// the client's tool_results (its calls then raise TimeoutError): the
	// real deadline of the paused response.
	PausedUntil time.Time
}

// IsError reports whether the result is an error block.
func (r *ToolResult) IsError() bool {
	return r.Type == ResultBashError || r.Type == ResultEditorError || r.Type == ResultSandboxError || r.Type == ResultCodeExecutionError || r.Type == ResultWebFetchError
}

// MarshalJSON writes the result in the shape of its type.
func (r ToolResult) MarshalJSON() ([]byte, error) {
	switch r.Type {
	case ResultBash, ResultCodeExecution:
		files := r.Files
		if files == nil {
			files = []OutputFile{}
		}
		return json.Marshal(struct {
			Type       string       `json:"type"`
			Stdout     string       `json:"stdout"`
			Stderr     string       `json:"stderr"`
			ReturnCode int          `json:"return_code"`
			Content    []OutputFile `json:"content"`
		}{r.Type, r.Stdout, r.Stderr, r.ReturnCode, files})
	case ResultEditorView:
		return json.Marshal(struct {
			Type       string `json:"type"`
			FileType   string `json:"file_type"`
			Content    string `json:"content"`
			NumLines   int    `json:"num_lines"`
			StartLine  int    `json:"start_line"`
			TotalLines int    `json:"total_lines"`
		}{r.Type, r.FileType, r.FileContent, r.NumLines, r.StartLine, r.TotalLines})
	case ResultEditorCreate:
		return json.Marshal(struct {
			Type         string `json:"type"`
			IsFileUpdate bool   `json:"is_file_update"`
		}{r.Type, r.IsFileUpdate})
	case ResultEditorStrReplace:
		lines := r.Lines
		if lines == nil {
			lines = []string{}
		}
		return json.Marshal(struct {
			Type     string   `json:"type"`
			OldStart int      `json:"old_start"`
			OldLines int      `json:"old_lines"`
			NewStart int      `json:"new_start"`
			NewLines int      `json:"new_lines"`
			Lines    []string `json:"lines"`
		}{r.Type, r.OldStart, r.OldLines, r.NewStart, r.NewLines, lines})
	case ResultSandboxBody, ResultWebFetch:
		if len(r.Body) == 0 {
			return nil, fmt.Errorf("messages: %s result without body", r.Type)
		}
		return r.Body, nil
	case ResultWebFetchError:
		return json.Marshal(struct {
			Type      string `json:"type"`
			ErrorCode string `json:"error_code"`
		}{r.Type, r.ErrorCode})
	case ResultBashError, ResultEditorError, ResultSandboxError, ResultCodeExecutionError:
		return json.Marshal(struct {
			Type      string       `json:"type"`
			ErrorCode string       `json:"error_code"`
			Detail    *ErrorDetail `json:"detail,omitempty"`
		}{r.Type, r.ErrorCode, r.Detail})
	}
	return nil, fmt.Errorf("messages: unknown tool result type %q", r.Type)
}

// UnmarshalJSON decodes a result of any known type.
func (r *ToolResult) UnmarshalJSON(data []byte) error {
	var aux struct {
		Type         string          `json:"type"`
		Stdout       string          `json:"stdout"`
		Stderr       string          `json:"stderr"`
		ReturnCode   int             `json:"return_code"`
		Content      json.RawMessage `json:"content"`
		FileType     string          `json:"file_type"`
		NumLines     int             `json:"num_lines"`
		StartLine    int             `json:"start_line"`
		TotalLines   int             `json:"total_lines"`
		IsFileUpdate bool            `json:"is_file_update"`
		OldStart     int             `json:"old_start"`
		OldLines     int             `json:"old_lines"`
		NewStart     int             `json:"new_start"`
		NewLines     int             `json:"new_lines"`
		Lines        []string        `json:"lines"`
		ErrorCode    string          `json:"error_code"`
		Detail       *ErrorDetail    `json:"detail"`
	}
	if err := jsonfield.Unmarshal(data, &aux); err != nil {
		return err
	}
	*r = ToolResult{
		Type: aux.Type, Stdout: aux.Stdout, Stderr: aux.Stderr, ReturnCode: aux.ReturnCode,
		FileType: aux.FileType, NumLines: aux.NumLines, StartLine: aux.StartLine, TotalLines: aux.TotalLines,
		IsFileUpdate: aux.IsFileUpdate, OldStart: aux.OldStart, OldLines: aux.OldLines,
		NewStart: aux.NewStart, NewLines: aux.NewLines, Lines: aux.Lines,
		ErrorCode: aux.ErrorCode, Detail: aux.Detail,
	}
	c := bytes.TrimSpace(aux.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		return json.Unmarshal(c, &r.FileContent)
	case c[0] == '[':
		return jsonfield.Under("content", jsonfield.Unmarshal(c, &r.Files))
	}
	return nil
}

// Usage counts tokens and server tool calls of a response.
type Usage struct {
	InputTokens              int            `json:"input_tokens"`
	OutputTokens             int            `json:"output_tokens"`
	CacheCreationInputTokens int            `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int            `json:"cache_read_input_tokens"`
	ServerToolUse            *ServerToolUse `json:"server_tool_use,omitempty"`
}

// ServerToolUse counts server tool calls.
type ServerToolUse struct {
	CodeExecutionRequests int `json:"code_execution_requests"`
	WebSearchRequests     int `json:"web_search_requests"`
	WebFetchRequests      int `json:"web_fetch_requests"`
}

// Container is the container a response ran in.
type Container struct {
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Response is a complete Messages API response.
type Response struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   string         `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        Usage          `json:"usage"`
	Container    *Container     `json:"container,omitempty"`
}

// Event types of a stream.
const (
	EventMessageStart      = "message_start"
	EventContentBlockStart = "content_block_start"
	EventContentBlockDelta = "content_block_delta"
	EventContentBlockStop  = "content_block_stop"
	EventMessageDelta      = "message_delta"
	EventMessageStop       = "message_stop"
	EventPing              = "ping"
	EventError             = "error"
)

// Delta types of content_block_delta events.
const (
	DeltaText      = "text_delta"
	DeltaInputJSON = "input_json_delta"
	DeltaThinking  = "thinking_delta"
	DeltaSignature = "signature_delta"
	DeltaCitations = "citations_delta"
)

// Event is one event of a response stream; its Type says which fields are
// set. The SSE event name is Type.
type Event struct {
	Type         string
	Message      *Response     // message_start
	Index        int           // content_block_*
	ContentBlock *ContentBlock // content_block_start
	Delta        *BlockDelta   // content_block_delta
	MessageDelta *MessageDelta // message_delta
	Usage        *Usage        // message_delta
	Error        *ErrorBody    // error
	Output       *ToolOutput   // threadbox_tool_output (live.go)
}

// BlockDelta is the delta of a content_block_delta event.
type BlockDelta struct {
	Type        string          `json:"type"`
	Text        string          `json:"text,omitempty"`
	PartialJSON string          `json:"partial_json,omitempty"`
	Thinking    string          `json:"thinking,omitempty"`
	Signature   string          `json:"signature,omitempty"`
	Citation    json.RawMessage `json:"citation,omitempty"`
}

// MarshalJSON always writes the field that carries the delta's payload,
// even when it is empty, after the type; a delta of another type is written
// with the fields it has.
func (d BlockDelta) MarshalJSON() ([]byte, error) {
	var key, val string
	switch d.Type {
	case DeltaText:
		key, val = "text", d.Text
	case DeltaInputJSON:
		key, val = "partial_json", d.PartialJSON
	case DeltaThinking:
		key, val = "thinking", d.Thinking
	case DeltaSignature:
		key, val = "signature", d.Signature
	default:
		type plain BlockDelta
		return json.Marshal(plain(d))
	}
	b := appendString(append(make([]byte, 0, len(d.Type)+len(key)+len(val)+24), `{"type":`...), d.Type)
	b = appendString(append(append(append(b, `,"`...), key...), `":`...), val)
	return append(b, '}'), nil
}

// MessageDelta is the delta of a message_delta event.
type MessageDelta struct {
	StopReason   string     `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Container    *Container `json:"container"`
}

// ErrorBody is the error of an error event and of the error envelope.
type ErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// MarshalJSON writes the event's data payload. The events of a stream's
// every answer (a message's start, a text block's start, deltas and stop,
// the message's delta, ping and stop) are appended to one buffer; the rest
// go through json.Marshal (marshalReflect), whose output the fast path's
// is byte for byte (FuzzEventMarshalMatchesReflect).
func (e Event) MarshalJSON() ([]byte, error) {
	if b, ok, err := e.appendFast(make([]byte, 0, 96)); ok || err != nil {
		return b, err
	}
	return e.marshalReflect()
}

// appendFast appends the event as marshalReflect writes it, when it is of
// a kind it knows (ok).
func (e Event) appendFast(dst []byte) (b []byte, ok bool, err error) {
	dst = appendString(append(dst, `{"type":`...), e.Type)
	switch e.Type {
	case EventContentBlockDelta:
		d := e.Delta
		if d == nil || d.Type != DeltaText {
			return nil, false, nil
		}
		dst = strconv.AppendInt(append(dst, `,"index":`...), int64(e.Index), 10)
		dst = appendString(append(dst, `,"delta":{"type":"text_delta","text":`...), d.Text)
		return append(dst, '}', '}'), true, nil
	case EventContentBlockStop:
		dst = strconv.AppendInt(append(dst, `,"index":`...), int64(e.Index), 10)
		return append(dst, '}'), true, nil
	case EventContentBlockStart:
		b := e.ContentBlock
		if b == nil || b.Type != BlockText || len(b.Citations) != 0 {
			return nil, false, nil
		}
		dst = strconv.AppendInt(append(dst, `,"index":`...), int64(e.Index), 10)
		dst, err = appendBlock(append(dst, `,"content_block":`...), b)
		return append(dst, '}'), err == nil, err
	case EventMessageStart:
		if e.Message == nil {
			return nil, false, nil
		}
		enc, err := e.Message.MarshalJSON()
		if err != nil {
			return nil, false, err
		}
		return append(append(append(dst, `,"message":`...), enc...), '}'), true, nil
	case EventMessageDelta:
		d := e.MessageDelta
		if d == nil || d.Container != nil {
			return nil, false, nil
		}
		dst = appendString(append(dst, `,"delta":{"stop_reason":`...), d.StopReason)
		dst = append(dst, `,"stop_sequence":`...)
		if d.StopSequence == nil {
			dst = append(dst, "null"...)
		} else {
			dst = appendString(dst, *d.StopSequence)
		}
		dst = append(dst, `,"container":null},"usage":`...)
		if e.Usage == nil {
			dst = append(dst, "null"...)
		} else if dst, err = appendUsage(dst, e.Usage); err != nil {
			return nil, false, err
		}
		return append(dst, '}'), true, nil
	case EventError, EventToolOutput:
		return nil, false, nil
	}
	return append(dst, '}'), true, nil // the type alone
}

// marshalReflect writes the event's data payload through json.Marshal.
func (e Event) marshalReflect() ([]byte, error) {
	switch e.Type {
	case EventMessageStart:
		return json.Marshal(struct {
			Type    string    `json:"type"`
			Message *Response `json:"message"`
		}{e.Type, e.Message})
	case EventContentBlockStart:
		return json.Marshal(struct {
			Type         string        `json:"type"`
			Index        int           `json:"index"`
			ContentBlock *ContentBlock `json:"content_block"`
		}{e.Type, e.Index, e.ContentBlock})
	case EventContentBlockDelta:
		return json.Marshal(struct {
			Type  string      `json:"type"`
			Index int         `json:"index"`
			Delta *BlockDelta `json:"delta"`
		}{e.Type, e.Index, e.Delta})
	case EventContentBlockStop:
		return json.Marshal(struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
		}{e.Type, e.Index})
	case EventMessageDelta:
		return json.Marshal(struct {
			Type  string        `json:"type"`
			Delta *MessageDelta `json:"delta"`
			Usage *Usage        `json:"usage"`
		}{e.Type, e.MessageDelta, e.Usage})
	case EventError:
		return json.Marshal(struct {
			Type  string     `json:"type"`
			Error *ErrorBody `json:"error"`
		}{e.Type, e.Error})
	case EventToolOutput:
		return json.Marshal(struct {
			Type string `json:"type"`
			*ToolOutput
		}{e.Type, e.Output})
	}
	return json.Marshal(struct {
		Type string `json:"type"`
	}{e.Type})
}

// UnmarshalJSON decodes an event's data payload: the events every streamed
// answer is made of by unmarshalFast, any other as json.Unmarshal decodes
// it (unmarshalReflect; FuzzEventUnmarshalMatchesReflect holds the two to
// the same events).
func (e *Event) UnmarshalJSON(data []byte) error {
	if e.unmarshalFast(data) {
		return nil
	}
	return e.unmarshalReflect(data)
}

// unmarshalFast decodes a text block's start, a text delta, a block's stop,
// ping, message_start, message_delta and message_stop as unmarshalReflect
// would, and reports whether it did. Anything else — another kind, a member it does not expect (in
// another case, twice, or unknown), an index that is not a plain integer,
// a value of another type — it leaves alone.
func (e *Event) unmarshalFast(data []byte) bool {
	if !json.Valid(data) {
		return false
	}
	const (
		hasType = 1 << iota
		hasIndex
		hasDelta
		hasBlock
		hasMessage
		hasUsage
	)
	var (
		typ                          string
		index                        int
		delta, block, message, usage []byte
		seen                         int
		ok                           = true
	)
	objectMembers(data, func(key string, v []byte) {
		var bit int
		switch key {
		case "type":
			bit = hasType
			typ, ok = quickString(v)
		case "index":
			bit = hasIndex
			ok = quickInt(v, &index)
		case "delta":
			bit, delta = hasDelta, v
		case "content_block":
			bit, block = hasBlock, v
		case "message":
			bit, message = hasMessage, v
		case "usage":
			bit, usage = hasUsage, v
		default:
			ok = false
		}
		if !ok || seen&bit != 0 {
			ok = false
			seen = -1
		}
		if seen >= 0 {
			seen |= bit
		}
	})
	if !ok || seen < 0 {
		return false
	}
	switch {
	case typ == EventContentBlockDelta && seen == hasType|hasIndex|hasDelta:
		text, ok := textDelta(delta)
		if !ok {
			return false
		}
		*e = Event{Type: typ, Index: index, Delta: &BlockDelta{Type: DeltaText, Text: text}}
	case typ == EventContentBlockStart && seen == hasType|hasIndex|hasBlock:
		if len(block) == 0 || block[0] != '{' {
			return false
		}
		var b ContentBlock
		if b.UnmarshalJSON(block) != nil || b.Type != BlockText {
			return false
		}
		*e = Event{Type: typ, Index: index, ContentBlock: &b}
	case typ == EventContentBlockStop && seen == hasType|hasIndex:
		*e = Event{Type: typ, Index: index}
	case (typ == EventPing || typ == EventMessageStop) && seen == hasType:
		*e = Event{Type: typ}
	case typ == EventMessageStart && seen == hasType|hasMessage:
		// The message by its own decoder, as json.Unmarshal would call it.
		if len(message) == 0 || message[0] != '{' {
			return false
		}
		var r Response
		if r.UnmarshalJSON(message) != nil {
			return false
		}
		*e = Event{Type: typ, Message: &r}
	case typ == EventMessageDelta && seen == hasType|hasDelta|hasUsage:
		if len(delta) == 0 || delta[0] != '{' || len(usage) == 0 || usage[0] != '{' {
			return false
		}
		var (
			d MessageDelta
			u Usage
		)
		if json.Unmarshal(delta, &d) != nil || json.Unmarshal(usage, &u) != nil {
			return false
		}
		*e = Event{Type: typ, MessageDelta: &d, Usage: &u}
	default:
		return false
	}
	return true
}

// textDelta decodes a text_delta's object, {"type":"text_delta","text":…}
// in either order and nothing else, and reports whether it was one.
func textDelta(v []byte) (string, bool) {
	if len(v) == 0 || v[0] != '{' {
		return "", false
	}
	var text string
	typed, texted, ok := false, false, true
	objectMembers(v, func(key string, v []byte) {
		switch {
		case key == "type" && !typed:
			typed = true
			t, isStr := quickString(v)
			ok = ok && isStr && t == DeltaText
		case key == "text" && !texted:
			texted = true
			var isStr bool
			if text, isStr = quickString(v); !isStr {
				// Escapes (a line break): encoding/json reads the string.
				isStr = len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &text) == nil
			}
			ok = ok && isStr
		default:
			ok = false
		}
	})
	return text, ok && typed && texted
}

// unmarshalReflect decodes an event's data payload through json.Unmarshal.
func (e *Event) unmarshalReflect(data []byte) error {
	var aux struct {
		Type         string          `json:"type"`
		Message      *Response       `json:"message"`
		Index        int             `json:"index"`
		ContentBlock *ContentBlock   `json:"content_block"`
		Delta        json.RawMessage `json:"delta"`
		Usage        *Usage          `json:"usage"`
		Error        *ErrorBody      `json:"error"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*e = Event{Type: aux.Type, Message: aux.Message, Index: aux.Index, ContentBlock: aux.ContentBlock, Usage: aux.Usage, Error: aux.Error}
	if aux.Type == EventToolOutput {
		e.Output = &ToolOutput{}
		return json.Unmarshal(data, e.Output)
	}
	if len(aux.Delta) > 0 && string(aux.Delta) != "null" {
		switch aux.Type {
		case EventContentBlockDelta:
			e.Delta = &BlockDelta{}
			return json.Unmarshal(aux.Delta, e.Delta)
		case EventMessageDelta:
			e.MessageDelta = &MessageDelta{}
			return json.Unmarshal(aux.Delta, e.MessageDelta)
		}
	}
	return nil
}

// The result blocks of the sandbox_v1 tools (docs/api.md, app/messages
// sandbox.go): a sandbox_tool_result block whose content is the tool's own
// result object, or an error.
const (
	BlockSandboxResult = "sandbox_tool_result"
	ResultSandboxError = "sandbox_tool_result_error"
)

// SandboxResult returns the result of a sandbox_v1 tool call: body is the
// content object, whose "type" is "<tool>_result".
func SandboxResult(body json.RawMessage) *ToolResult {
	return &ToolResult{Type: ResultSandboxBody, Body: body}
}

// ResultSandboxBody is the ToolResult type of a successful sandbox_v1
// result; its content is Body, written as is.
const ResultSandboxBody = "sandbox_tool_result_body"

// sandboxResultOf decodes the content of a sandbox_tool_result block.
func sandboxResultOf(content json.RawMessage) (*ToolResult, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := jsonfield.Unmarshal(content, &head); err != nil {
		return nil, err
	}
	if head.Type == ResultSandboxError {
		var r ToolResult
		if err := jsonfield.Unmarshal(content, &r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	return SandboxResult(append(json.RawMessage(nil), content...)), nil
}

// The result blocks of the Python tool: code_execution_20250522's only
// tool and the Python sub-tool of code_execution_20260120 and
// code_execution_20260521 (app/messages codeexec.go).
const (
	BlockCodeExecutionResult = "code_execution_tool_result"
	ResultCodeExecution      = "code_execution_result"
	ResultCodeExecutionError = "code_execution_tool_result_error"
	// ResultCodeExecutionOutput is the type of an entry of a
	// code_execution_result's content: a file the cell left in $OUTPUT_DIR.
	ResultCodeExecutionOutput = "code_execution_output"
)

// EventToolOutput is threadbox's extension event: output of a server tool
// call while it runs, sent only when the turn asks for live output
// (RunOptions.LiveOutput: the chat always, the Messages API with the
// threadbox-beta: live-output header). The official SDKs pass an event
// type they do not know by without changing the message they accumulate;
// the call's result block still carries the whole output.
const EventToolOutput = "threadbox_tool_output"

// ToolOutput is the data of an EventToolOutput event: text a running call
// wrote to one stream, in order, and how long after the call's start.
type ToolOutput struct {
	ToolUseID string `json:"tool_use_id"`
	Stream    string `json:"stream"` // "stdout" or "stderr"
	Text      string `json:"text"`
	ElapsedMs int64  `json:"elapsed_ms"`
}

// MarshalJSON writes stop_reason as null while it is unknown, fields in the
// Anthropic API's order.
func (r Response) MarshalJSON() ([]byte, error) {
	size := 256
	for i := range r.Content {
		size += 64 + len(r.Content[i].Text) + len(r.Content[i].Raw)
	}
	buf := make([]byte, 0, size)
	buf = appendString(append(buf, `{"id":`...), r.ID)
	buf = appendString(append(buf, `,"type":`...), r.Type)
	buf = appendString(append(buf, `,"role":`...), r.Role)
	buf = appendString(append(buf, `,"model":`...), r.Model)
	buf = append(buf, `,"content":[`...)
	var err error
	for i := range r.Content {
		if i > 0 {
			buf = append(buf, ',')
		}
		if buf, err = appendBlock(buf, &r.Content[i]); err != nil {
			return nil, err
		}
	}
	buf = append(buf, `],"stop_reason":`...)
	if r.StopReason == "" {
		buf = append(buf, "null"...)
	} else {
		buf = appendString(buf, r.StopReason)
	}
	buf = append(buf, `,"stop_sequence":`...)
	if r.StopSequence == nil {
		buf = append(buf, "null"...)
	} else {
		buf = appendString(buf, *r.StopSequence)
	}
	if buf, err = appendUsage(append(buf, `,"usage":`...), &r.Usage); err != nil {
		return nil, err
	}
	if r.Container != nil {
		enc, err := json.Marshal(r.Container)
		if err != nil {
			return nil, err
		}
		buf = append(append(buf, `,"container":`...), enc...)
	}
	return append(buf, '}'), nil
}
