package boxes

import (
	"log/slog"
	"strings"
	"sync"
)

// LogTail logs what a sandbox writes to its stderr (its agent's log, and
// the runtime's own errors) line by line, and keeps the last bytes for the
// error of a boot that failed. It is safe for concurrent use.
type LogTail struct {
	log *slog.Logger
	msg string
	id  string

	mu   sync.Mutex
	buf  []byte // the line being written
	last []byte // the last tailBytes written
}

// tailBytes is how much of the end of the stream a LogTail keeps.
const tailBytes = 2048

// NewLogTail returns a LogTail logging each line as msg with the
// sandbox's id.
func NewLogTail(log *slog.Logger, msg, id string) *LogTail {
	return &LogTail{log: log, msg: msg, id: id}
}

// Write logs every complete line of p (and a line longer than 4 KiB as it
// is) and keeps the tail.
func (w *LogTail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = append(w.last, p...)
	if len(w.last) > tailBytes {
		w.last = w.last[len(w.last)-tailBytes:]
	}
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.log.Info(w.msg, "id", w.id, "line", string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 {
		w.log.Info(w.msg, "id", w.id, "line", string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// Tail returns the last bytes written, trimmed.
func (w *LogTail) Tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.last))
}
