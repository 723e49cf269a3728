package protocol

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestOutbox(t *testing.T) {
	for _, tc := range []struct {
		name     string
		push     []string
		end      string // "finish", "drop" or ""
		wantOK   []bool
		wantNext string // what Next takes first
		wantDone bool   // whether the call after it reports the end
	}{
		{name: "in order", push: []string{"ab", "cd"}, end: "finish", wantOK: []bool{true, true}, wantNext: "abcd", wantDone: true},
		{name: "over the bound", push: []string{"abc", "def", "g"}, end: "finish", wantOK: []bool{true, false, true}, wantNext: "abcg", wantDone: true},
		{name: "finish keeps what is queued", push: []string{"x"}, end: "finish", wantOK: []bool{true}, wantNext: "x", wantDone: true},
		{name: "drop loses it", push: []string{"x"}, end: "drop", wantOK: []bool{true}, wantNext: "", wantDone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOutbox(4)
			for i, p := range tc.push {
				if ok := o.Push([]byte(p)); ok != tc.wantOK[i] {
					t.Errorf("push %q: %v, want %v", p, ok, tc.wantOK[i])
				}
			}
			switch tc.end {
			case "finish":
				o.Finish()
			case "drop":
				o.Drop()
			}
			if !o.Closing() {
				t.Error("not closing after its end")
			}
			if !o.Push([]byte("late")) {
				t.Error("a push after the end is refused instead of dropped")
			}
			q, done := o.Next()
			var got strings.Builder
			for _, b := range q {
				got.Write(b)
			}
			if got.String() != tc.wantNext {
				t.Errorf("next: %q, want %q", got.String(), tc.wantNext)
			}
			if tc.wantNext != "" {
				_, done = o.Next()
			}
			if done != tc.wantDone {
				t.Errorf("done %v, want %v", done, tc.wantDone)
			}
		})
	}
}

// TestOutboxWaits checks that Next waits for a push from another goroutine.
func TestOutboxWaits(t *testing.T) {
	o := NewOutbox(16)
	got := make(chan string)
	go func() {
		q, _ := o.Next()
		got <- string(q[0])
	}()
	o.Push([]byte("hello"))
	if s := <-got; s != "hello" {
		t.Fatalf("next: %q", s)
	}
}

// sink is a WriteCloser that keeps what it is given, failing writes past
// failAfter bytes (0: never).
type sink struct {
	strings.Builder
	failAfter int
	closed    bool
}

func (s *sink) Write(b []byte) (int, error) {
	if s.failAfter > 0 && s.Len()+len(b) > s.failAfter {
		return 0, io.ErrClosedPipe
	}
	return s.Builder.Write(b)
}

func (s *sink) Close() error { s.closed = true; return nil }

func TestOutboxDrain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failAfter int
		want      string
		wantSizes []int
	}{
		{"all, then closed", 0, "abcde", []int{2, 3}},
		{"a failed write closes", 3, "ab", []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOutbox(16)
			o.Push([]byte("ab"))
			o.Push([]byte("cde"))
			o.Finish()
			w := &sink{failAfter: tc.failAfter}
			var sizes []int
			o.Drain(w, func(n int) { sizes = append(sizes, n) })
			if w.String() != tc.want || !w.closed || !slices.Equal(sizes, tc.wantSizes) {
				t.Errorf("wrote %q (closed %v, sizes %v), want %q closed, sizes %v", w.String(), w.closed, sizes, tc.want, tc.wantSizes)
			}
		})
	}
}
