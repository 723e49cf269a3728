package web

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
)

// serveStreaming serves a net/http handler from a Fiber handler and
// streams its response: what the handler writes reaches the client each
// time it flushes (an SSE stream's events as they happen), where Fiber's
// adaptor would hold the whole body until the handler returns. The
// request's context ends when the client goes away (a write to it fails),
// when the server shuts down, or when the handler returns; an idle
// text/event-stream gets an SSE comment every s.keepAlive, so a client
// that left is noticed.
func (s *Server) serveStreaming(c *fiber.Ctx, h http.Handler, r *http.Request) error {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.stopping, cancel)
	w := &streamWriter{header: http.Header{}, started: make(chan struct{}), chunks: make(chan []byte), ctx: ctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.finish()
		defer s.survive("a streamed handler")
		h.ServeHTTP(w, r.WithContext(ctx))
	}()
	select {
	case <-w.started:
	case <-done:
	}
	status, header := w.head()
	for k, vs := range header {
		for _, v := range vs {
			c.Response().Header.Add(k, v)
		}
	}
	c.Status(status)
	select {
	case <-done:
		// Written whole before the handler returned: sent as it is.
		stop()
		cancel()
		return c.Send(w.rest())
	default:
	}
	sse := bytes.HasPrefix([]byte(header.Get(fiber.HeaderContentType)), []byte("text/event-stream"))
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer stop()
		defer cancel()
		tick := time.NewTicker(s.keepAlive)
		defer tick.Stop()
		for {
			select {
			case chunk, ok := <-w.chunks:
				if !ok {
					return
				}
				if _, err := bw.Write(chunk); err != nil {
					return
				}
				if err := bw.Flush(); err != nil {
					return
				}
			case <-tick.C:
				if !sse {
					continue
				}
				if _, err := bw.WriteString(": keep-alive\n\n"); err != nil {
					return
				}
				if err := bw.Flush(); err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	})
	return nil
}

// keepAliveEvery is how often an idle streamed event stream gets a comment.
const keepAliveEvery = 25 * time.Second

// streamWriter is the http.ResponseWriter of serveStreaming: it keeps the
// status and header until the first flush (or the handler's end), then
// hands each flushed piece of the body to the stream writer.
type streamWriter struct {
	mu      sync.Mutex
	header  http.Header
	status  int
	sent    http.Header // the header as it was when the response started
	buf     []byte
	started chan struct{}
	once    sync.Once
	chunks  chan []byte
	ctx     context.Context
	ended   bool
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status = code
	}
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.ended {
		return 0, http.ErrHandlerTimeout
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// Flush starts the response, if not yet started, and sends what was
// written since the last flush.
func (w *streamWriter) Flush() {
	w.mu.Lock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.begin()
	chunk := w.buf
	w.buf = nil
	w.mu.Unlock()
	if len(chunk) == 0 {
		return
	}
	select {
	case w.chunks <- chunk:
	case <-w.ctx.Done():
	}
}

// begin fixes the header and tells serveStreaming that the response
// started; w.mu is held.
func (w *streamWriter) begin() {
	w.once.Do(func() {
		w.sent = w.header.Clone()
		close(w.started)
	})
}

// head returns the status and header the response starts with.
func (w *streamWriter) head() (int, http.Header) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.sent == nil {
		w.sent = w.header.Clone()
	}
	return w.status, w.sent
}

// rest returns what the handler wrote and did not flush.
func (w *streamWriter) rest() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf
}

// finish ends the stream once the handler returned: what it wrote last is
// flushed when the response streams.
func (w *streamWriter) finish() {
	w.mu.Lock()
	streaming := w.sent != nil
	w.mu.Unlock()
	if streaming {
		w.Flush()
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
		close(w.chunks)
	}
}
