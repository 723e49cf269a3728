package wire

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The hot encoders (a text block, a response) append to one buffer instead
// of going through json.Marshal, which reflects over an anonymous struct
// per block and scans each Marshaler's output once more to compact it.
// Their output is byte for byte json.Marshal's (TestEncodersMatchMarshal).

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as json.Marshal escapes
// it: HTML's <, > and &, U+2028 and U+2029, invalid UTF-8 as U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(dst, s[start:]...), '"')
}

// appendBlock appends a content block as json.Marshal writes it in a list:
// a text block without citations or cache_control directly, any other
// through its MarshalJSON and json.Marshal's compaction.
func appendBlock(dst []byte, b *ContentBlock) ([]byte, error) {
	if b.Type == BlockText && len(b.Citations) == 0 && len(b.CacheControl) == 0 {
		dst = append(dst, `{"type":"text","text":`...)
		return append(appendString(dst, b.Text), '}'), nil
	}
	enc, err := json.Marshal(b)
	if err != nil {
		return dst, err
	}
	return append(dst, enc...), nil
}

// appendUsage appends u as json.Marshal writes it.
func appendUsage(dst []byte, u *Usage) ([]byte, error) {
	if u.ServerToolUse != nil {
		enc, err := json.Marshal(u)
		return append(dst, enc...), err
	}
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.InputTokens), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.OutputTokens), 10)
	dst = append(dst, `,"cache_creation_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CacheCreationInputTokens), 10)
	dst = append(dst, `,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CacheReadInputTokens), 10)
	return append(dst, '}'), nil
}
