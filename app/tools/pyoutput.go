package tools

import (
	"bytes"
	"encoding/json"

	"threadbox/domain/sandbox"
)

// cellOutput reads what the Python driver writes during one cell, as it
// arrives: the output subprocesses wrote straight to the streams (kept up to
// a limit, the rest only counted as cut) and the driver's answer line for
// this cell. Host memory stays bounded whatever the cell prints. A marker
// whose line is not this cell's answer (a cell printing one) is output.
type cellOutput struct {
	id    string
	limit int // bytes of raw output kept per stream

	stdout, stderr       []byte
	stdoutCut, stderrCut bool

	pending []byte // stdout that may begin a marker, or the answer line so far
	inLine  bool   // pending holds an answer line after its marker
	answer  *pythonAnswer
}

// maxAnswerLine bounds an answer line: the driver caps each stream at limit
// characters, at most 4 bytes each once encoded, plus JSON's escapes.
func (c *cellOutput) maxAnswerLine() int { return 16*c.limit + 1<<20 }

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
			if j < 0 {
				if len(data) > c.maxAnswerLine() {
					// No answer is that long: it was output.
					c.inLine = false
					c.raw(marker)
					continue
				}
				c.pending = append([]byte(nil), data...)
				return
			}
			line := data[:j]
			var a pythonAnswer
			if json.Unmarshal(line, &a) == nil && a.ID == c.id {
				c.answer = &a
				return
			}
			c.inLine = false
			c.raw(marker)
			continue // the line itself is output, read again
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

// raw keeps b as output written straight to stdout.
func (c *cellOutput) raw(b []byte) {
	c.stdout, c.stdoutCut = keep(c.stdout, b, c.limit, c.stdoutCut)
}

// rest returns the raw output, with what was held back as a possible marker
// or an unfinished line (the driver ended first).
func (c *cellOutput) rest() (stdout []byte, stdoutCut bool, stderr []byte, stderrCut bool) {
	if c.answer == nil && len(c.pending) > 0 {
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
