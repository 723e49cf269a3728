package tools

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"threadbox/domain/sandbox"
)

// TestWindow writes chunks of every size around the window's into a
// window and, after each, reads from cursors before, inside and after
// what it holds, against a plain copy of everything written.
func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int
		start int64
	}{
		{"small", 7, 0},
		{"a session's", 64, 0},
		{"taken over with earlier output", 16, 1000},
		{"no window", 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.max)))
			w := window{max: tc.max, start: tc.start}
			var all []byte // everything written, the first byte at tc.start
			for i := range 400 {
				b := make([]byte, rng.IntN(3*tc.max+2))
				for j := range b {
					b[j] = byte(rng.IntN(256))
				}
				w.write(b)
				all = append(all, b...)
				end := tc.start + int64(len(all))
				kept := min(int64(tc.max), int64(len(all)))
				for _, cursor := range []int64{0, tc.start, end - kept - 1, end - kept, end - kept/2, end - 1, end, end + 5} {
					data, gotEnd, dropped := w.since(cursor)
					wantFrom := max(cursor, end-kept)
					wantFrom = min(wantFrom, end)
					want := all[wantFrom-tc.start:]
					wantDropped := max(0, end-kept-cursor)
					if gotEnd != end || dropped != wantDropped || !bytes.Equal(data, want) {
						t.Fatalf("write %d (%d bytes), since(%d): end %d dropped %d, %d bytes; want end %d dropped %d, %d bytes (equal %v)",
							i, len(b), cursor, gotEnd, dropped, len(data), end, wantDropped, len(want), bytes.Equal(data, want))
					}
				}
			}
		})
	}
}

// BenchmarkTerminalOutput is a session printing without pause: 32 KiB
// chunks (the agent's largest) into a full 1 MiB window.
func BenchmarkTerminalOutput(b *testing.B) {
	t := newTerminal("sess_bench", 1<<20)
	chunk := bytes.Repeat([]byte("y\n"), 16<<10)
	for range 64 {
		t.output(sandbox.Stdout, chunk)
	}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		t.output(sandbox.Stdout, chunk)
	}
}
