package messages

import (
	"strings"
	"unicode/utf8"
)

// Truncated ends every tool output cut at its size limit.
const Truncated = "...[truncated]"

// CapOutput returns b as valid UTF-8 for a tool result, cut to limit bytes
// and marked with Truncated when it was cut here or before (truncated).
func CapOutput(b []byte, truncated bool, limit int) string {
	if len(b) > limit {
		b, truncated = b[:limit], true
	}
	s := string(b)
	if truncated {
		// Do not leave half a rune behind at the cut.
		for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if truncated {
		s += Truncated
	}
	return s
}
