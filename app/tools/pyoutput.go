package tools

import (
	"bytes"
	"encoding/json"

	"threadbox/domain/sandbox"
)

// cellOutput reads what the Python driver writes during one cell, as it
// arrives: the output subprocesses and threads wrote straight to the
// streams (kept up to a limit, the rest only counted as cut) and the
// driver's answer for this cell, which comes as lines
//
//	"\x00TBPY <id> + <piece of the answer's JSON>\n" … "\x00TBPY <id> $ <last piece>\n"
//
// each short enough (under PIPE_BUF) that no other writer to the pipe can
// split it, while other output may come between them. Host memory stays
// bounded whatever the cell prints; a marker line that is not a piece of
// this cell's answer (a cell printing one) is output.
type cellOutput struct {
	id    string
	limit int // bytes of raw output kept per stream

	stdout, stderr       []byte
	stdoutCut, stderrCut bool

	pending []byte // stdout that may begin a marker, or a marker line so far
	inLine  bool   // pending holds a marker line after its marker
	pieces  []byte // the answer's JSON so far
	answer  *pythonAnswer
	bad     bool // the pieces did not decode: the answer is lost
}

// maxMarkerLine bounds a marker line after its marker: the driver's are
// under 4096 bytes.
const maxMarkerLine = 8 << 10

// maxAnswer bounds an answer's JSON: the driver caps each stream at limit
// characters, at most 4 bytes each once encoded, plus JSON's escapes.
func (c *cellOutput) maxAnswer() int { return 16*c.limit + 1<<20 }

// write takes one chunk of the driver's output.
func (c *cellOutput) write(s sandbox.Stream, b []byte) {
	if s == sandbox.Stderr {
		c.stderr, c.stderrCut = keep(c.stderr, b, c.limit, c.stderrCut)
		return
	}
	if c.answer != nil {
		return // what follows the answer is not this cell's
	}
	data := append(c.pending, b...)
	c.pending = nil
	marker := []byte(pyMarker)
	for len(data) > 0 && c.answer == nil {
		if c.inLine {
			j := bytes.IndexByte(data, '\n')
			if j < 0 && len(data) <= maxMarkerLine {
				c.pending = append([]byte(nil), data...)
				return
			}
			c.inLine = false
			if j >= 0 && c.piece(data[:j]) {
				data = data[j+1:]
				continue
			}
			c.raw(marker) // not a piece of this answer: output, read again
			continue
		}
		if i := bytes.Index(data, marker); i >= 0 {
			c.raw(data[:i])
			data = data[i+len(marker):]
			c.inLine = true
			continue
		}
		k := partialMarker(data, marker)
		c.raw(data[:len(data)-k])
		c.pending = append([]byte(nil), data[len(data)-k:]...)
		return
	}
}

// piece takes a marker line "<id> <+|$> <piece>" of this cell's answer and
// reports whether it was one.
func (c *cellOutput) piece(line []byte) bool {
	id, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || string(id) != c.id || len(rest) < 2 || rest[1] != ' ' || (rest[0] != '+' && rest[0] != '$') {
		return false
	}
	if len(c.pieces)+len(rest)-2 > c.maxAnswer() {
		c.bad = true
	}
	if !c.bad {
		c.pieces = append(c.pieces, rest[2:]...)
	}
	if rest[0] == '$' {
		var a pythonAnswer
		if c.bad || json.Unmarshal(c.pieces, &a) != nil || a.ID != c.id {
			a = pythonAnswer{ID: c.id, ReturnCode: 1, Stderr: "[threadbox] The Python interpreter's answer could not be read."}
		}
		c.answer, c.pieces = &a, nil
	}
	return true
}

// raw keeps b as output written straight to stdout.
func (c *cellOutput) raw(b []byte) {
	c.stdout, c.stdoutCut = keep(c.stdout, b, c.limit, c.stdoutCut)
}

// rest returns the raw output, with what was held back as a possible marker
// or an unfinished line (the driver ended first).
func (c *cellOutput) rest() (stdout []byte, stdoutCut bool, stderr []byte, stderrCut bool) {
	if c.answer == nil && (len(c.pending) > 0 || c.inLine) {
		if c.inLine {
			c.raw([]byte(pyMarker))
		}
		c.raw(c.pending)
		c.pending, c.inLine = nil, false
	}
	return c.stdout, c.stdoutCut, c.stderr, c.stderrCut
}

// keep appends b to buf up to limit bytes; cut reports that some did not fit.
func keep(buf, b []byte, limit int, cut bool) ([]byte, bool) {
	room := limit - len(buf)
	if len(b) > room {
		return append(buf, b[:max(room, 0)]...), true
	}
	return append(buf, b...), cut
}

// partialMarker returns the length of the longest end of data that begins
// marker.
func partialMarker(data, marker []byte) int {
	for k := min(len(data), len(marker)-1); k > 0; k-- {
		if bytes.HasPrefix(marker, data[len(data)-k:]) {
			return k
		}
	}
	return 0
}
