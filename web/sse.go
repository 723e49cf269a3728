package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"
)

// sseWriter writes Server-Sent Events and flushes each one as it is
// written. Once a write fails (the client went away) it cancels the
// stream's context and every later write fails at once.
type sseWriter struct {
	w      *bufio.Writer
	cancel context.CancelFunc
	err    error
}

// Event writes one event named name whose data is v as JSON, and flushes it.
func (s *sseWriter) Event(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sse: encode %s: %w", name, err)
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return s.fail(err)
	}
	if err := s.w.Flush(); err != nil {
		return s.fail(err)
	}
	return nil
}

func (s *sseWriter) fail(err error) error {
	s.err = fmt.Errorf("sse: client gone: %w", err)
	s.cancel()
	return s.err
}

// streamSSE answers with an event stream: fn runs once the handler has
// returned, writing events through w; ctx ends when the client goes away.
// Everything fn needs from the request must be read before streamSSE is
// called: the fiber.Ctx is not valid inside fn.
func streamSSE(c *fiber.Ctx, fn func(ctx context.Context, w *sseWriter)) {
	c.Set(fiber.HeaderContentType, "text/event-stream; charset=utf-8")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderConnection, "keep-alive")
	c.Set("X-Accel-Buffering", "no")
	c.Status(fiber.StatusOK)
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fn(ctx, &sseWriter{w: bw, cancel: cancel})
	})
}
