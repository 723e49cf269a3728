package messages

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"threadbox/app/messages/wire"
)

// Limits of live output: output after a quiet spell goes at once, output
// within liveEvery of a send is coalesced (up to liveChunk bytes), and a
// call sends at most liveCap bytes per stream live
// (its result block has the whole capped output), so a flood of output
// cannot swamp a stream or a turn's log.
const (
	liveEvery = 50 * time.Millisecond
	liveChunk = 16 << 10
	liveCap   = 1 << 20
)

// liveOutput coalesces a running call's output chunks into EventToolOutput
// events. It is safe for concurrent use; after close it sends nothing.
type liveOutput struct {
	id    string
	start time.Time
	send  func(wire.Event) error

	mu     sync.Mutex
	buf    map[string][]byte // per stream, not yet sent
	sent   map[string]int    // per stream, bytes sent
	kept   map[string][]byte // per stream, everything taken (up to liveCap)
	timer  *time.Timer
	last   time.Time // when the last event was sent
	closed bool
}

func newLiveOutput(toolUseID string, send func(wire.Event) error) *liveOutput {
	return &liveOutput{id: toolUseID, start: time.Now(), send: send, buf: map[string][]byte{}, sent: map[string]int{}, kept: map[string][]byte{}}
}

// write takes a chunk of stream s. Output after a quiet spell is sent at
// once; output that follows a send within liveEvery is coalesced and sent
// when that window ends (or when liveChunk bytes are waiting), so a chatty
// command makes at most one event per stream per window.
func (l *liveOutput) write(s string, chunk []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.sent[s]+len(l.buf[s]) >= liveCap {
		return
	}
	room := liveCap - l.sent[s] - len(l.buf[s])
	l.buf[s] = append(l.buf[s], chunk[:min(len(chunk), room)]...)
	l.kept[s] = append(l.kept[s], chunk[:min(len(chunk), room)]...)
	wait := liveEvery - time.Since(l.last)
	if len(l.buf[s]) >= liveChunk || (wait <= 0 && l.timer == nil) {
		l.flushLocked(false)
		return
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(wait, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.timer = nil
			l.flushLocked(false)
		})
	}
}

// flushLocked sends what is buffered. Unless final, an incomplete UTF-8
// sequence at the end of a stream's buffer waits for its next bytes.
func (l *liveOutput) flushLocked(final bool) {
	if l.closed {
		return
	}
	for _, s := range []string{"stdout", "stderr"} {
		b := l.buf[s]
		n := len(b)
		if !final {
			n = completeUTF8(b)
		}
		if n == 0 {
			continue
		}
		ev := wire.Event{Type: wire.EventToolOutput, Output: &wire.ToolOutput{ToolUseID: l.id, Stream: s, Text: string(b[:n]), ElapsedMs: time.Since(l.start).Milliseconds()}}
		l.sent[s] += n
		l.last = time.Now()
		l.buf[s] = append(b[:0:0], b[n:]...)
		if l.send(ev) != nil {
			l.closed = true // the stream is gone; the turn ends by itself
			return
		}
	}
}

// close sends what is buffered and stops the live output: the call's
// result follows.
func (l *liveOutput) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.flushLocked(true)
	l.closed = true
}

// completeUTF8 returns the length of b without an incomplete UTF-8
// sequence at its end.
func completeUTF8(b []byte) int {
	// An incomplete sequence is at most three bytes long.
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// so far returns what the call wrote to stream s up to now (up to liveCap).
func (l *liveOutput) soFar(s string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.kept[s])
}

// StoppedNote ends the stderr of a command whose turn was stopped while it
// ran (its result keeps the output so far, with the return code of a
// command that timed out).
const StoppedNote = "Command stopped."

// stoppedResult is the result of a call whose turn ended while it ran: a
// command keeps what it wrote so far, shaped as a timeout (return code 124)
// with StoppedNote; another call is an error result saying so.
func stoppedResult(call ToolCall, live *liveOutput) *wire.ToolResult {
	if call.Name != wire.SubToolBash || live == nil {
		return ErrorResult(call.Name, wire.CodeUnavailable, "The call was stopped before it ended.")
	}
	stderr := live.soFar("stderr")
	if stderr != "" && !strings.HasSuffix(stderr, "\n") {
		stderr += "\n"
	}
	return &wire.ToolResult{Type: wire.ResultBash, Stdout: live.soFar("stdout"), Stderr: stderr + StoppedNote, ReturnCode: 124}
}
