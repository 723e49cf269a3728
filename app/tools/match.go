package tools

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MatchKind says how edit_file found the text it replaced.
type MatchKind string

// The kinds of matches, tried in this order.
const (
	MatchExact      MatchKind = "exact"
	MatchWhitespace MatchKind = "whitespace"
	MatchNear       MatchKind = "near"
)

// DefaultNearThreshold is the least similarity (0-1) a near match needs.
const DefaultNearThreshold = 0.85

// nearTie is how close to the best a second near match may come before the
// match is called ambiguous.
const nearTie = 0.02

// maxNearBytes bounds the text searched for near matches.
const maxNearBytes = 2 << 20

// nearWork bounds the edit-distance cells one search for a near match may
// fill (well under a second of CPU): a pathological file and old_str give up
// rather than take the host's CPU for minutes.
const nearWork = 200_000_000

// Match is where the editor replaces: text[Start:End].
type Match struct {
	Start, End int
	Kind       MatchKind
	Similarity float64 // 1 for exact and whitespace matches
}

// MatchError explains why no single match was found.
type MatchError struct {
	Ambiguous bool
	Count     int       // places that matched, when Ambiguous
	Kind      MatchKind // the kind of match that was ambiguous
	Best      float64   // the best near similarity seen, when not found
	BestLine  int       // its 1-based line
	GaveUp    bool      // the search for a near match ran out of its work bound
}

func (e *MatchError) Error() string {
	if e.Ambiguous {
		return fmt.Sprintf("old_str matches %d places (%s match); include more surrounding lines to pick one", e.Count, e.Kind)
	}
	if e.GaveUp {
		return "old_str was not found, not even with whitespace differences, and the file and old_str are too large to search for a similar text; give the exact text"
	}
	if e.BestLine > 0 {
		return fmt.Sprintf("old_str was not found, not even with whitespace differences; the closest text (line %d) is only %.0f%% similar", e.BestLine, e.Best*100)
	}
	return "old_str was not found"
}

// FindMatch finds the one place of text that old refers to: an exact
// occurrence, else one that differs only in whitespace, else the most
// similar run of lines whose similarity reaches threshold. Several equally
// good places are an ambiguous match and an error.
func FindMatch(text, old string, threshold float64) (Match, error) {
	if old == "" {
		return Match{}, &MatchError{}
	}
	if m, err := exactMatch(text, old); err == nil {
		return m, nil
	} else if err.Ambiguous {
		return Match{}, err
	}
	if m, n := whitespaceMatch(text, old); n == 1 {
		return m, nil
	} else if n > 1 {
		return Match{}, &MatchError{Ambiguous: true, Count: n, Kind: MatchWhitespace}
	}
	return nearMatch(text, old, threshold)
}

// exactMatch finds the one place where old stands in text as it is.
func exactMatch(text, old string) (Match, *MatchError) {
	switch n := strings.Count(text, old); n {
	case 0:
		return Match{}, &MatchError{}
	case 1:
		i := strings.Index(text, old)
		return Match{Start: i, End: i + len(old), Kind: MatchExact, Similarity: 1}, nil
	default:
		return Match{}, &MatchError{Ambiguous: true, Count: n, Kind: MatchExact}
	}
}

// squeeze removes every whitespace rune from s and returns, for each byte
// kept, its offset in s.
func squeeze(s string) (string, []int) {
	var b strings.Builder
	var at []int
	for i, r := range s {
		if unicode.IsSpace(r) {
			continue
		}
		n := utf8.RuneLen(r)
		if r == utf8.RuneError {
			n = 1
		}
		b.WriteString(s[i : i+n])
		for k := range n {
			at = append(at, i+k)
		}
	}
	return b.String(), at
}

// whitespaceMatch finds old in text ignoring whitespace; it returns the
// match and the number of places found.
func whitespaceMatch(text, old string) (Match, int) {
	sq, at := squeeze(text)
	so, _ := squeeze(old)
	if so == "" {
		return Match{}, 0
	}
	n, first := 0, -1
	for i := 0; ; {
		j := strings.Index(sq[i:], so)
		if j < 0 {
			break
		}
		if first < 0 {
			first = i + j
		}
		n++
		i += j + 1
	}
	if n != 1 {
		return Match{}, n
	}
	start := at[first]
	end := at[first+len(so)-1] + 1
	return Match{Start: start, End: end, Kind: MatchWhitespace, Similarity: 1}, 1
}

// line is one line of a text: text[start:end] without its newline.
type line struct{ start, end int }

func splitLineSpans(text string) []line {
	var out []line
	start := 0
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			out = append(out, line{start, i})
			start = i + 1
		}
	}
	if start < len(text) {
		out = append(out, line{start, len(text)})
	}
	return out
}

// normalize collapses whitespace runs to one space and trims the ends, so
// that indentation changes weigh little in a similarity.
func normalize(s string) []rune {
	return []rune(strings.Join(strings.Fields(s), " "))
}

// nearMatch finds the run of whole lines most similar to old.
func nearMatch(text, old string, threshold float64) (Match, error) {
	if threshold <= 0 || threshold > 1 {
		threshold = DefaultNearThreshold
	}
	if len(text) > maxNearBytes {
		return Match{}, &MatchError{}
	}
	lines := splitLineSpans(text)
	k := len(splitLineSpans(strings.TrimSuffix(old, "\n")))
	target := normalize(old)
	if len(target) == 0 || len(lines) == 0 {
		return Match{}, &MatchError{}
	}
	type cand struct {
		first, last int // line indexes, inclusive
		sim         float64
	}
	var all []cand
	best := cand{sim: -1}
	work := nearWork
	for w := max(k-1, 1); w <= k+1; w++ {
		for i := 0; i+w <= len(lines); i++ {
			span := text[lines[i].start:lines[i+w-1].end]
			sim := similarity(normalize(span), target, threshold, &work)
			if work < 0 {
				return Match{}, &MatchError{GaveUp: true}
			}
			if sim < 0 {
				continue
			}
			c := cand{i, i + w - 1, sim}
			all = append(all, c)
			if sim > best.sim {
				best = c
			}
		}
	}
	if best.sim < threshold {
		e := &MatchError{}
		// Report the closest text even below the threshold, for the model.
		if b, line := closest(text, lines, k, target); b > 0 {
			e.Best, e.BestLine = b, line
		}
		return Match{}, e
	}
	rivals := 1
	for _, c := range all {
		overlaps := c.first <= best.last && best.first <= c.last
		if !overlaps && c.sim >= best.sim-nearTie {
			rivals++
		}
	}
	if rivals > 1 {
		return Match{}, &MatchError{Ambiguous: true, Count: rivals, Kind: MatchNear}
	}
	return Match{Start: lines[best.first].start, End: lines[best.last].end, Kind: MatchNear, Similarity: best.sim}, nil
}

// closest returns the best similarity of any k-line window, unbounded.
func closest(text string, lines []line, k int, target []rune) (float64, int) {
	best, at := 0.0, 0
	k = max(k, 1)
	work := nearWork
	for i := 0; i+k <= len(lines) && i < 20000 && work >= 0; i++ {
		s := similarity(normalize(text[lines[i].start:lines[i+k-1].end]), target, 0, &work)
		if s > best {
			best, at = s, i+1
		}
	}
	return best, at
}

// similarity is 1 - the edit distance over the longer length. When floor
// is above 0 it returns -1 as soon as the result must fall below floor. It
// takes the cells it fills from *work and returns -1 when they run out
// (*work < 0 then).
func similarity(a, b []rune, floor float64, work *int) float64 {
	n := max(len(a), len(b))
	if n == 0 {
		return 1
	}
	limit := n
	if floor > 0 {
		limit = int((1 - floor) * float64(n))
		if d := len(a) - len(b); d > limit || -d > limit {
			return -1
		}
	}
	d := boundedDistance(a, b, limit, work)
	if d < 0 {
		return -1
	}
	return 1 - float64(d)/float64(n)
}

// boundedDistance is the Levenshtein distance of a and b, or -1 when it
// exceeds limit or *work runs out; it fills only the band of width limit
// around the diagonal, taking each cell from *work.
func boundedDistance(a, b []rune, limit int, work *int) int {
	const inf = 1 << 30
	if d := len(a) - len(b); d > limit || -d > limit {
		return -1 // the distance is at least the difference in length
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		if j <= limit {
			prev[j] = j
		} else {
			prev[j] = inf
		}
	}
	for i := 1; i <= len(a); i++ {
		lo, hi := max(1, i-limit), min(len(b), i+limit)
		if *work -= hi - lo + 1; *work < 0 {
			return -1
		}
		// Only the band is read: its edges are made infinite, not the row.
		cur[0] = inf
		if i <= limit {
			cur[0] = i
		}
		if lo > 1 {
			cur[lo-1] = inf
		}
		rowMin := cur[0]
		for j := lo; j <= hi; j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := prev[j-1] + cost
			if prev[j]+1 < v {
				v = prev[j] + 1
			}
			if cur[j-1]+1 < v {
				v = cur[j-1] + 1
			}
			cur[j] = v
			if v < rowMin {
				rowMin = v
			}
		}
		if hi < len(b) {
			cur[hi+1] = inf
		}
		if rowMin > limit {
			return -1
		}
		prev, cur = cur, prev
	}
	if prev[len(b)] > limit {
		return -1
	}
	return prev[len(b)]
}
