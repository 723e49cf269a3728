package messages

import "testing"

func TestCapOutput(t *testing.T) {
	cases := []struct {
		in        string
		truncated bool
		limit     int
		want      string
	}{
		{"abc", false, 10, "abc"},
		{"abc", true, 10, "abc...[truncated]"},    // cut before, by the backend
		{"abcdef", false, 3, "abc...[truncated]"}, // cut here
		{"aé", false, 2, "a...[truncated]"},       // no half rune left at the cut
		{"a\xffb", false, 10, "a\uFFFDb"},         // invalid bytes replaced
	}
	for _, c := range cases {
		if got := CapOutput([]byte(c.in), c.truncated, c.limit); got != c.want {
			t.Errorf("CapOutput(%q, %v, %d) = %q, want %q", c.in, c.truncated, c.limit, got, c.want)
		}
	}
}
