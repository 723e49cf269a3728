package snapshot

import (
	"math"
	"slices"
	"testing"
)

func TestRetentionPrune(t *testing.T) {
	// s builds snapshots named by id with (size, bytes) pairs.
	s := func(id string, size, bytes int64) Snapshot { return Snapshot{ID: id, Size: size, Bytes: bytes} }
	ids := func(ss []Snapshot) []string {
		out := []string{}
		for _, x := range ss {
			out = append(out, x.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		r         Retention
		in        []Snapshot
		drop      []string
		keep      []string
		firstKept int64 // the oldest kept's Bytes
	}{
		{"within the count", Retention{Count: 3}, []Snapshot{s("a", 10, 10), s("b", 10, 2)}, []string{}, []string{"a", "b"}, 10},
		{"the oldest past the count", Retention{Count: 2}, []Snapshot{s("a", 10, 10), s("b", 10, 2), s("c", 12, 4)}, []string{"a"}, []string{"b", "c"}, 10},
		{"default count", Retention{}, make20("x"), []string{}, ids(make20("x")), 1},
		{"bytes: the next takes over the shared files", Retention{Bytes: 25}, []Snapshot{s("a", 10, 10), s("b", 12, 4), s("c", 20, 10)},
			// a+b+c store 24; fits.
			[]string{}, []string{"a", "b", "c"}, 10},
		{"bytes: dropping one grows the next", Retention{Bytes: 23}, []Snapshot{s("a", 10, 10), s("b", 12, 4), s("c", 20, 10)},
			// 24 > 23: drop a, b now stores 12: 22 fits.
			[]string{"a"}, []string{"b", "c"}, 12},
		{"a count too large to multiply keeps them all", Retention{Count: math.MaxInt64/MaxPerTurn + 1}, []Snapshot{s("a", 10, 10), s("b", 10, 2)}, []string{}, []string{"a", "b"}, 10},
		{"the largest count keeps them all", Retention{Count: math.MaxInt}, []Snapshot{s("a", 10, 10), s("b", 10, 2)}, []string{}, []string{"a", "b"}, 10},
		{"bytes: a newest too large for the bound is dropped", Retention{Bytes: 5}, []Snapshot{s("a", 10, 10)}, []string{"a"}, []string{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drop, keep := tc.r.Prune(tc.in)
			if got := ids(drop); !slices.Equal(got, tc.drop) {
				t.Fatalf("drop = %v, want %v", got, tc.drop)
			}
			if got := ids(keep); !slices.Equal(got, tc.keep) {
				t.Fatalf("keep = %v, want %v", got, tc.keep)
			}
			if len(keep) > 0 && keep[0].Bytes != tc.firstKept {
				t.Fatalf("oldest kept stores %d, want %d", keep[0].Bytes, tc.firstKept)
			}
		})
	}
}

// make20 returns DefaultCount snapshots of one byte each.
func make20(prefix string) []Snapshot {
	out := make([]Snapshot, DefaultCount)
	for i := range out {
		out[i] = Snapshot{ID: prefix + string(rune('a'+i)), Size: 1, Bytes: 1}
	}
	return out
}

func TestNewRetention(t *testing.T) {
	for _, tc := range []struct {
		count int
		bytes int64
		ok    bool
	}{{0, 0, true}, {5, 1 << 20, true}, {-1, 0, false}, {0, -1, false}} {
		if _, err := NewRetention(tc.count, tc.bytes); (err == nil) != tc.ok {
			t.Errorf("NewRetention(%d, %d) err = %v", tc.count, tc.bytes, err)
		}
	}
}

func TestRetentionCountsTurns(t *testing.T) {
	in := []Snapshot{
		{ID: "t1", Kind: KindTurn, Size: 1, Bytes: 1},
		{ID: "s2", Kind: KindStart, Size: 1, Bytes: 1},
		{ID: "c2", Kind: KindCall, Size: 1, Bytes: 1},
		{ID: "t2", Kind: KindTurn, Size: 1, Bytes: 0},
		{ID: "c3", Kind: KindCall, Size: 1, Bytes: 0},
	}
	drop, keep := Retention{Count: 1}.Prune(in)
	if len(drop) != 1 || drop[0].ID != "t1" || len(keep) != 4 {
		t.Fatalf("drop %v keep %v", drop, keep)
	}
	drop, _ = Retention{Count: 2}.Prune(in)
	if len(drop) != 0 {
		t.Fatalf("two turns kept whole, dropped %v", drop)
	}
}

func TestDiffAndTouched(t *testing.T) {
	a := File{Size: 1, Mode: 0o644, SHA256: "a"}
	b := File{Size: 1, Mode: 0o644, SHA256: "b"}
	before := map[string]File{"workspace/keep": a, "workspace/edit": a, "workspace/gone": a, "workspace/mode": a}
	x := a
	x.Mode = 0o755
	after := map[string]File{"workspace/keep": a, "workspace/edit": b, "workspace/new": b, "workspace/mode": x}
	got := Diff(before, after)
	want := []string{"workspace/edit changed", "workspace/gone deleted", "workspace/mode changed", "workspace/new created"}
	var have []string
	for _, c := range got {
		have = append(have, c.Path+" "+c.Op)
	}
	if !slices.Equal(have, want) {
		t.Fatalf("diff %v, want %v", have, want)
	}
	// Later: edit changed again, gone recreated, new untouched.
	later := map[string]File{"workspace/edit": a, "workspace/gone": b, "workspace/new": b, "workspace/mode": x}
	if got := Touched(got, later); !slices.Equal(got, []string{"workspace/edit", "workspace/gone"}) {
		t.Fatalf("touched %v", got)
	}
}

func TestCheckPath(t *testing.T) {
	for p, ok := range map[string]bool{"workspace/a.txt": true, "outputs/d/e": true, "workspace": false, "etc/passwd": false, "workspace/../x": false, "workspace//x": false, "/workspace/a": false} {
		if err := CheckPath(p); (err == nil) != ok {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
	}
}
