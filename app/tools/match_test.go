package tools

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

const goSource = `package main

func main() {
	total := 0
	for i := 0; i < 10; i++ {
		total += i
	}
	fmt.Println("total", total)
}

func helper(a, b int) int {
	return a + b
}
`

func TestFindMatch(t *testing.T) {
	tests := []struct {
		name      string
		text, old string
		kind      MatchKind
		want      string // the text replaced
		ambiguous bool
		notFound  bool
	}{
		{name: "exact", text: goSource, old: "return a + b", kind: MatchExact, want: "return a + b"},
		{name: "exact ambiguous", text: goSource, old: "total", ambiguous: true},
		{name: "whitespace: indentation and spacing differ", text: goSource,
			old:  "for i := 0; i < 10; i++ {\n    total += i\n}",
			kind: MatchWhitespace, want: "for i := 0; i < 10; i++ {\n\t\ttotal += i\n\t}"},
		{name: "whitespace: tabs for spaces and missing spaces", text: goSource, old: "func helper(a,b int)  int {",
			kind: MatchWhitespace, want: "func helper(a, b int) int {"},
		{name: "whitespace ambiguous", text: "a  b\nx\na b\n", old: "a\tb", ambiguous: true},
		{name: "near: a word moved slightly", text: goSource, old: "\tfmt.Println(\"totals:\", total)\n",
			kind: MatchNear, want: "\tfmt.Println(\"total\", total)"},
		{name: "near: two lines, one slightly off", text: goSource, old: "func helper(a, b int) int {\n\treturn a - b",
			kind: MatchNear, want: "func helper(a, b int) int {\n\treturn a + b"},
		{name: "near ambiguous", text: "value = compute(alpha)\nother\nvalue = compute(alpho)\n", old: "value = compute(alphx)", ambiguous: true},
		{name: "too different", text: goSource, old: "import \"net/http\"\nvar server = http.Server{}", notFound: true},
		{name: "empty old_str", text: goSource, old: "", notFound: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := FindMatch(tc.text, tc.old, DefaultNearThreshold)
			var me *MatchError
			switch {
			case tc.ambiguous:
				if !errors.As(err, &me) || !me.Ambiguous || me.Count < 2 {
					t.Fatalf("err = %v, want ambiguous", err)
				}
				return
			case tc.notFound:
				if !errors.As(err, &me) || me.Ambiguous {
					t.Fatalf("err = %v (match %+v), want not found", err, m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind != tc.kind || tc.text[m.Start:m.End] != tc.want {
				t.Fatalf("match %s %q, want %s %q", m.Kind, tc.text[m.Start:m.End], tc.kind, tc.want)
			}
			if (m.Kind == MatchNear) != (m.Similarity < 1) || m.Similarity < DefaultNearThreshold {
				t.Fatalf("similarity %v for a %s match", m.Similarity, m.Kind)
			}
		})
	}
}

func TestNotFoundReportsClosest(t *testing.T) {
	_, err := FindMatch(goSource, "return a * b * c * d", DefaultNearThreshold)
	var me *MatchError
	if !errors.As(err, &me) || me.BestLine != 12 || me.Best <= 0 || me.Best >= DefaultNearThreshold {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), "line 12") {
		t.Fatalf("message %q", err)
	}
}

func TestSimilarity(t *testing.T) {
	tests := []struct {
		a, b  string
		floor float64
		want  float64
	}{
		{"kitten", "sitting", 0, 1 - 3.0/7},
		{"same", "same", 0.9, 1},
		{"abcdefghij", "abcdefghiX", 0.85, 0.9},
		{"abcdefghij", "XXXdefghij", 0.85, -1}, // below the floor: cut short
		{"", "", 0, 1},
	}
	for _, tc := range tests {
		if got := similarity([]rune(tc.a), []rune(tc.b), tc.floor, new(int(nearWork))); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("similarity(%q, %q, %v) = %v, want %v", tc.a, tc.b, tc.floor, got, tc.want)
		}
	}
}

// levenshtein is the plain full-matrix edit distance, the reference for
// the banded one.
func levenshtein(a, b []rune) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j-1]+cost, prev[j]+1, cur[j-1]+1)
		}
		prev = cur
	}
	return prev[len(b)]
}

// TestBoundedDistanceMatchesLevenshtein: the band (whose edges alone are
// reset between rows) gives the full distance whenever it is within the
// limit, and -1 otherwise.
func TestBoundedDistanceMatchesLevenshtein(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() []rune {
		r := make([]rune, rng.IntN(30))
		for i := range r {
			r[i] = rune('a' + rng.IntN(3))
		}
		return r
	}
	for range 5000 {
		a, b := word(), word()
		limit := rng.IntN(35)
		want := levenshtein(a, b)
		if want > limit {
			want = -1
		}
		work := nearWork
		if got := boundedDistance(a, b, limit, &work); got != want {
			t.Fatalf("boundedDistance(%q, %q, %d) = %d, want %d", string(a), string(b), limit, got, want)
		}
	}
}

// TestNearMatchGivesUp: a file and old_str whose near search would fill
// trillions of cells (a 2 MiB line that old_str nearly equals) give up
// within the work bound instead of holding a CPU for most of an hour.
func TestNearMatchGivesUp(t *testing.T) {
	text := strings.Repeat("a", 2<<20)
	old := "b" + text[1:]
	_, err := FindMatch(text, old, DefaultNearThreshold)
	var me *MatchError
	if !errors.As(err, &me) || !me.GaveUp || !strings.Contains(err.Error(), "give the exact text") {
		t.Fatalf("FindMatch = %v", err)
	}
}
