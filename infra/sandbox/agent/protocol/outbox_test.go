package protocol

import (
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
