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
	"tool_use_id", "content", "is_error", "file_id", "caller"}

// quickTextBlock decodes a text block without citations; ok is false for
// anything else. data is valid JSON.
func quickTextBlock(data []byte, b *ContentBlock) (ok bool) {
	var typ, text string
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
			ok = json.Unmarshal(v, &fast.Usage) == nil
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
	for i := skipSpace(v, 1); i < len(v) && v[i] != ']'; {
		end := skipValue(v, i)
		var b ContentBlock
		if !quickTextBlock(v[i:end], &b) {
			return nil, false
		}
		blocks = append(blocks, b)
		if i = skipSpace(v, end); i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return blocks, true
}
