package wire

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// The common shapes of a model's reply (a response of text blocks) are
// decoded by hand from the member scan of objectMembers instead of by
// encoding/json's reflection over an aux struct per block; anything less
// common (another block type, an escaped string, a key in other case, a
// value of a wrong kind) goes to encoding/json, so that the result and
// every error are what it gives. TestFastDecodeMatchesSlow holds both to
// the same answers.

// quickString returns the JSON string v without escapes, and whether it
// was one: a string with escapes, control characters or invalid UTF-8 is
// for encoding/json.
func quickString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	s := v[1 : len(v)-1]
	for _, c := range s {
		if c < 0x20 || c == '\\' || c == '"' {
			return "", false
		}
	}
	if !utf8.Valid(s) {
		return "", false
	}
	return string(s), true
}

// isNull reports whether v is the JSON literal null.
func isNull(v []byte) bool { return string(v) == "null" }

// foldsTo reports whether key is not one of names but equal to one of them
// but for case: encoding/json would take it for that field.
func foldsTo(key string, names ...string) bool {
	for _, n := range names {
		if key != n && strings.EqualFold(key, n) {
			return true
		}
	}
	return false
}

var blockKeys = []string{"type", "text", "citations", "thinking", "signature", "data", "id", "name", "input",
	"tool_use_id", "content", "is_error", "file_id", "caller", "cache_control"}

// quickTextBlock decodes a text block without citations; ok is false for
// anything else. data is valid JSON.
func quickTextBlock(data []byte, b *ContentBlock) (ok bool) {
	var (
		typ, text string
		cache     json.RawMessage
	)
	ok = true
	objectMembers(data, func(k string, v []byte) {
		if !ok {
			return
		}
		switch k {
		case "type":
			typ, ok = quickString(v)
		case "text":
			if !isNull(v) {
				text, ok = quickString(v)
			}
		case "citations":
			ok = isNull(v)
		case "cache_control":
			cache = v // the last one counts, as for encoding/json
			if isNull(v) {
				cache = nil
			}
		default:
			for _, n := range blockKeys {
				if strings.EqualFold(k, n) {
					ok = false // another field of a block, or one in other case
					return
				}
			}
		}
	})
	if !ok || typ != BlockText {
		return false
	}
	*b = ContentBlock{Type: BlockText, Text: text, Raw: append(json.RawMessage(nil), data...)}
	if cache != nil {
		b.CacheControl = append(json.RawMessage(nil), cache...)
	}
	return true
}

var responseKeys = []string{"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage", "container"}

// UnmarshalJSON decodes a response. The common reply of a model (strings
// without escapes, text blocks) is read from one scan of its members;
// anything else as encoding/json reads it.
func (r *Response) UnmarshalJSON(data []byte) error {
	var fast Response
	i := skipSpace(data, 0)
	ok := i < len(data) && data[i] == '{'
	objectMembers(data, func(k string, v []byte) {
		if !ok {
			return
		}
		str := func(dst *string) {
			if !isNull(v) {
				*dst, ok = quickString(v)
			}
		}
		switch k {
		case "id":
			str(&fast.ID)
		case "type":
			str(&fast.Type)
		case "role":
			str(&fast.Role)
		case "model":
			str(&fast.Model)
		case "stop_reason":
			str(&fast.StopReason)
		case "stop_sequence":
			if isNull(v) {
				fast.StopSequence = nil
				return
			}
			s, good := quickString(v)
			fast.StopSequence, ok = &s, good
		case "content":
			fast.Content, ok = quickBlocks(v)
		case "usage":
			ok = quickUsage(v, &fast.Usage)
		case "container":
			ok = false // a model's reply has none: encoding/json reads it
		default:
			ok = !foldsTo(k, responseKeys...)
		}
	})
	if ok {
		*r = fast
		return nil
	}
	type plain Response
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*r = Response(p)
	return nil
}

// quickBlocks decodes an array of text blocks; ok is false when one is of
// another kind.
func quickBlocks(v []byte) ([]ContentBlock, bool) {
	if isNull(v) {
		return nil, true
	}
	if len(v) == 0 || v[0] != '[' {
		return nil, false
	}
	blocks := []ContentBlock{}
	for elem := range arrayElements(v) {
		var b ContentBlock
		if !quickTextBlock(elem, &b) {
			return nil, false
		}
		blocks = append(blocks, b)
	}
	return blocks, true
}

var usageKeys = []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "server_tool_use"}

// quickUsage decodes a usage object of whole numbers into u (over what it
// holds, as encoding/json does); ok is false for anything else.
func quickUsage(v []byte, u *Usage) (ok bool) {
	if isNull(v) {
		return true
	}
	if v[0] != '{' {
		return false
	}
	ok = true
	objectMembers(v, func(k string, n []byte) {
		if !ok {
			return
		}
		var dst *int
		switch k {
		case "input_tokens":
			dst = &u.InputTokens
		case "output_tokens":
			dst = &u.OutputTokens
		case "cache_creation_input_tokens":
			dst = &u.CacheCreationInputTokens
		case "cache_read_input_tokens":
			dst = &u.CacheReadInputTokens
		case "server_tool_use":
			ok = false
			return
		default:
			ok = !foldsTo(k, usageKeys...)
			return
		}
		ok = quickInt(n, dst)
	})
	return ok
}

// quickInt decodes a whole number into dst (null leaves it), as
// encoding/json decodes one into an int; ok is false for anything else
// (fractions, exponents, numbers that might overflow), which is
// encoding/json's to judge.
func quickInt(n []byte, dst *int) bool {
	if isNull(n) {
		return true
	}
	if len(n) == 0 || len(n) > 18 {
		return false
	}
	neg := n[0] == '-'
	digits := n
	if neg {
		digits = n[1:]
	}
	if len(digits) == 0 {
		return false
	}
	x := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
		x = x*10 + int(c-'0')
	}
	if neg {
		x = -x
	}
	*dst = x
	return true
}

// quickRequest decodes a request of the known fields whose messages'
// content is a string or text blocks; ok is false for any other. model,
// max_tokens, stream and the messages are read by hand; the other known
// fields (tools, container, system, …) each by json.Unmarshal of its own
// value into its own field, as encoding/json does within the whole request
// (FuzzFastPathsMatchSlow holds the two to the same answers). data is
// valid JSON.
func quickRequest(data []byte) (r Request, ok bool) {
	i := skipSpace(data, 0)
	ok = i < len(data) && data[i] == '{'
	objectMembers(data, func(k string, v []byte) {
		if !ok {
			return
		}
		switch k {
		case "model":
			if !isNull(v) {
				r.Model, ok = quickString(v)
			}
		case "max_tokens":
			ok = quickInt(v, &r.MaxTokens)
		case "stream":
			switch string(v) {
			case "true":
				r.Stream = true
			case "false":
				r.Stream = false
			default:
				ok = isNull(v)
			}
		case "messages":
			r.Messages, ok = quickMessages(v)
		case "system":
			ok = json.Unmarshal(v, &r.System) == nil
		case "tools":
			ok = json.Unmarshal(v, &r.Tools) == nil
		case "tool_choice":
			ok = json.Unmarshal(v, &r.ToolChoice) == nil
		case "container":
			ok = json.Unmarshal(v, &r.Container) == nil
		case "temperature":
			ok = json.Unmarshal(v, &r.Temperature) == nil
		case "top_p":
			ok = json.Unmarshal(v, &r.TopP) == nil
		case "top_k":
			ok = json.Unmarshal(v, &r.TopK) == nil
		case "stop_sequences":
			ok = json.Unmarshal(v, &r.StopSequences) == nil
		case "metadata":
			ok = json.Unmarshal(v, &r.Metadata) == nil
		case "thinking":
			ok = json.Unmarshal(v, &r.Thinking) == nil
		default:
			ok = false
		}
	})
	return r, ok
}

// quickMessages decodes an array of messages of role and content, the
// content a string or text blocks.
func quickMessages(v []byte) ([]Message, bool) {
	if isNull(v) {
		return nil, true
	}
	if v[0] != '[' {
		return nil, false
	}
	msgs := []Message{}
	for elem := range arrayElements(v) {
		m, ok := quickMessage(elem)
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
	}
	return msgs, true
}

func quickMessage(v []byte) (m Message, ok bool) {
	ok = len(v) > 0 && v[0] == '{'
	objectMembers(v, func(k string, c []byte) {
		if !ok {
			return
		}
		switch k {
		case "role":
			if !isNull(c) {
				m.Role, ok = quickString(c)
			}
		case "content":
			switch {
			case isNull(c):
				m.Content = nil
			case c[0] == '"':
				var s string
				s, ok = quickString(c)
				m.Content = []ContentBlock{{Type: BlockText, Text: s}}
			default:
				m.Content, ok = quickBlocks(c)
			}
		default:
			ok = false
		}
	})
	return m, ok
}
