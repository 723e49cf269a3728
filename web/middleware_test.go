package web

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestSurviveLogsAPanicOfAGoroutine: a panic in a goroutine a handler
// started (a stream writer) is logged and the process goes on; without
// survive the test binary itself would die.
func TestSurviveLogsAPanicOfAGoroutine(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	s := &Server{log: slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer s.survive("a stream writer")
		var m map[string]int
		m["boom"]++ // a nil map write panics
	}()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if out := buf.String(); !strings.Contains(out, "panic in a stream writer") || !strings.Contains(out, "nil map") || !strings.Contains(out, "stack=") {
		t.Fatalf("log: %s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
