package tools

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"threadbox/domain/sandbox"
)

// answerLines is the driver's answer as it writes it: JSON cut into
// marker lines of at most piece bytes.
func answerLines(a pythonAnswer, piece int) string {
	data, _ := json.Marshal(a)
	var b strings.Builder
	for i := 0; i < max(len(data), 1); i += piece {
		end := min(i+piece, len(data))
		more := "+"
		if end == len(data) {
			more = "$"
		}
		b.WriteString(pyMarker + a.ID + " " + more + " " + string(data[i:end]) + "\n")
	}
	return b.String()
}

func answerLine(id, stdout string) string {
	return answerLines(pythonAnswer{ID: id, Stdout: stdout}, 3800)
}

func TestCellOutput(t *testing.T) {
	tests := []struct {
		name      string
		stdout    string // all the driver writes to stdout, fed in chunks
		stderr    string
		limit     int
		answer    string // the answer's stdout; "-" for no answer
		raw       string // raw stdout kept
		rawCut    bool
		stderrOut string
		stderrCut bool
	}{
		{name: "answer only", stdout: answerLine("c1", "hi"), answer: "hi"},
		{name: "subprocess output first", stdout: "from ls\n" + answerLine("c1", "x"), answer: "x", raw: "from ls\n"},
		{name: "a printed marker is output", stdout: answerLine("other", "fake") + "more\n" + answerLine("c1", "real"), answer: "real",
			raw: answerLine("other", "fake") + "more\n"},
		{name: "a NUL that starts no marker", stdout: "a\x00TB!" + answerLine("c1", ""), answer: "", raw: "a\x00TB!"},
		{name: "driver ended on a partial marker", stdout: "bye\x00TBP", answer: "-", raw: "bye\x00TBP"},
		{name: "driver ended in its answer line", stdout: "bye" + pyMarker + `{"id":"c1"`, answer: "-", raw: "bye" + pyMarker + `{"id":"c1"`},
		{name: "output past the limit is cut", stdout: strings.Repeat("y", 100) + answerLine("c1", "ok"), limit: 10, answer: "ok",
			raw: strings.Repeat("y", 10), rawCut: true},
		{name: "stderr past the limit is cut", stdout: answerLine("c1", ""), stderr: "0123456789abc", limit: 10, answer: "",
			stderrOut: "0123456789", stderrCut: true},
		{name: "output after the answer is not the cell's", stdout: answerLine("c1", "a") + "late\n", answer: "a"},
		{name: "output between the pieces of an answer", stdout: func() string {
			lines := strings.SplitAfter(answerLines(pythonAnswer{ID: "c1", Stdout: strings.Repeat("q", 50)}, 10), "\n")
			return lines[0] + "thread\n" + lines[1] + "child " + strings.Join(lines[2:], "")
		}(), answer: strings.Repeat("q", 50), raw: "thread\nchild "},
		{name: "pieces that do not decode", stdout: pyMarker + "c1 + {\"id\n" + pyMarker + "c1 $ x\n", answer: ""},
		{name: "a marker line without a newline is output", stdout: pyMarker + strings.Repeat("w", 9000), answer: "-",
			raw: pyMarker + strings.Repeat("w", 9000)},
	}
	for _, tc := range tests {
		for _, size := range []int{1, 3, 7, 1 << 20} { // every split of the stream
			limit := tc.limit
			if limit == 0 {
				limit = 1 << 20
			}
			c := &cellOutput{id: "c1", limit: limit}
			for s := tc.stdout; s != ""; {
				n := min(size, len(s))
				c.write(sandbox.Stdout, []byte(s[:n]))
				s = s[n:]
			}
			c.write(sandbox.Stderr, []byte(tc.stderr))
			switch {
			case tc.answer == "-" && c.answer != nil:
				t.Fatalf("%s (chunks of %d): an answer %+v", tc.name, size, c.answer)
			case tc.answer != "-" && (c.answer == nil || c.answer.Stdout != tc.answer):
				t.Fatalf("%s (chunks of %d): answer %+v, want stdout %q", tc.name, size, c.answer, tc.answer)
			}
			wantStderr := tc.stderrOut
			if wantStderr == "" {
				wantStderr = tc.stderr
			}
			raw, rawCut, stderr, stderrCut := c.rest()
			if string(raw) != tc.raw || rawCut != tc.rawCut || string(stderr) != wantStderr || stderrCut != tc.stderrCut {
				t.Fatalf("%s (chunks of %d): raw %q cut %v, stderr %q cut %v", tc.name, size, raw, rawCut, stderr, stderrCut)
			}
		}
	}
}

func TestCellOutputFloodStaysBounded(t *testing.T) {
	c := &cellOutput{id: "c1", limit: 1 << 10}
	chunk := bytes.Repeat([]byte("z"), 32<<10)
	for range 320 { // 10 MiB
		c.write(sandbox.Stdout, chunk)
		if len(c.stdout) > 1<<10 || len(c.pending) > len(pyMarker) {
			t.Fatalf("kept %d bytes and %d pending", len(c.stdout), len(c.pending))
		}
	}
	c.write(sandbox.Stdout, []byte(answerLine("c1", "done")))
	if c.answer == nil || c.answer.Stdout != "done" || !c.stdoutCut {
		t.Fatalf("answer %+v, cut %v", c.answer, c.stdoutCut)
	}
}
