package id

import (
	"regexp"
	"testing"
)

// TestIdentifiers: identifiers have their documented form and never repeat,
// across many refills of the read-ahead pool.
func TestIdentifiers(t *testing.T) {
	newForm := regexp.MustCompile(`^p_[0-9a-hjkmnp-tv-z]{26}$`)
	textForm := regexp.MustCompile(`^[A-Z2-7]{26}$`)
	seen := map[string]bool{}
	for range 20000 {
		n, x := New("p"), Text()
		if !newForm.MatchString(n) || !textForm.MatchString(x) {
			t.Fatalf("New %q, Text %q: wrong form", n, x)
		}
		if seen[n] || seen[x] {
			t.Fatalf("repeated identifier: %q or %q", n, x)
		}
		seen[n], seen[x] = true, true
	}
}
