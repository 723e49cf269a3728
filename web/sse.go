package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages/wire"
)

// sseWriter writes Server-Sent Events and flushes each one as it is
// written. Once a write fails (the client went away) it cancels the
// stream's context and every later write fails at once. It is safe for
// concurrent use, so a keep-alive may write beside the stream's producer.
type sseWriter struct {
	w      *bufio.Writer
	cancel context.CancelFunc
	// peer, when set, is the client's connection: the keep-alive also
	// checks whether the client closed it, without waiting for a write
	// to fail.
	peer net.Conn

	mu   sync.Mutex
	err  error
	last time.Time // when the last event was written
	// quiet holds the keep-alive's events until the stream's first event
	// was written (followSSE's quietStart).
	quiet bool
}

// Event writes one event named name whose data is v as JSON, and flushes it
// with whatever Hold wrote before it.
func (s *sseWriter) Event(name string, v any) error {
	return s.event(name, v, true)
}

// Hold writes one event as Event does but does not flush it: the next
// Event or Flush sends it on. A caller that holds an event writes or
// flushes another before it waits for anything.
func (s *sseWriter) Hold(name string, v any) error {
	return s.event(name, v, false)
}

// Flush sends on what Hold wrote.
func (s *sseWriter) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.w.Buffered() == 0 {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return s.fail(err)
	}
	return nil
}

func (s *sseWriter) event(name string, v any, flush bool) error {
	data, err := marshalEvent(v)
	if err != nil {
		return fmt.Errorf("sse: encode %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(name, data, flush)
}

func (s *sseWriter) writeLocked(name string, data []byte, flush bool) error {
	if s.err != nil {
		return s.err
	}
	_, _ = s.w.WriteString("event: ")
	_, _ = s.w.WriteString(name)
	_, _ = s.w.WriteString("\ndata: ")
	_, _ = s.w.Write(data)
	if _, err := s.w.WriteString("\n\n"); err != nil {
		return s.fail(err) // a bufio.Writer keeps its first error
	}
	if flush {
		if err := s.w.Flush(); err != nil {
			return s.fail(err)
		}
	}
	s.last = time.Now()
	s.quiet = false
	return nil
}

// marshalEvent is json.Marshal(v). A Messages API event's own encoding is
// json.Marshal's of a struct, compact and HTML-escaped already, which is
// what json.Marshal would make of it once more after scanning it again
// (TestMarshalEventIsMarshal).
func marshalEvent(v any) ([]byte, error) {
	if ev, ok := v.(wire.Event); ok {
		return ev.MarshalJSON()
	}
	return json.Marshal(v)
}

func (s *sseWriter) fail(err error) error {
	s.err = fmt.Errorf("sse: client gone: %w", err)
	s.cancel()
	return s.err
}

// errPeerClosed reports a client that closed its connection.
var errPeerClosed = errors.New("the client closed the connection")

// keepAlive writes the event named name with data v whenever the stream has
// been silent for every, until stop is called or a write fails. The writes
// also notice a client that went away while nothing else is sent (a long
// command): the failed write cancels the stream's context; with a peer
// connection, a client that closed it is noticed within every/2. stop
// waits for the keep-alive to end; call it before the stream writer
// returns.
func (s *sseWriter) keepAlive(every time.Duration, name string, v any) (stop func()) {
	data, err := json.Marshal(v)
	if err != nil || every <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every / 2)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				if s.tick(now, every, name, data) != nil {
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// tick is one check of the keep-alive at now: the stream fails once the
// client closed it, and gets the event name with data once it has been
// silent for every (and, when quiet, has had its first event).
func (s *sseWriter) tick(now time.Time, every time.Duration, name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err
	case s.peer != nil && peerClosed(s.peer):
		return s.fail(errPeerClosed)
	case !s.quiet && now.Sub(s.last) >= every:
		return s.writeLocked(name, data, true)
	}
	return nil
}

// sseHeaders sets the headers of an event stream answer.
func sseHeaders(c *fiber.Ctx) {
	c.Set(fiber.HeaderContentType, "text/event-stream; charset=utf-8")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderConnection, "keep-alive")
	c.Set("X-Accel-Buffering", "no")
	c.Status(fiber.StatusOK)
}

// followSSE answers with an event stream a client follows (a turn's
// events, a terminal's output) from where it resumes (lastEventID). exists
// runs first: its error (an unknown turn or session) is the answer, before
// the stream begins. Then fn runs, once the handler has returned, writing
// the events after after through w, which sends a ping whenever the stream
// is silent for a while; ctx ends when the client goes away (a write
// fails, or it closes the connection). With quietStart, a stream followed
// from its start sends no ping before its first event: a turn's stream
// opens with message_start, as Anthropic's streams do, however long the
// model takes to start (a client that closes its connection meanwhile is
// still noticed). Everything fn needs from the request must be read
// before followSSE is called: the fiber.Ctx is not valid inside fn.
func (s *Server) followSSE(c *fiber.Ctx, quietStart bool, exists func() error, fn func(ctx context.Context, w *sseWriter, after int64)) error {
	after, err := lastEventID(c)
	if err != nil {
		return err
	}
	if err := exists(); err != nil {
		return err
	}
	peer := c.Context().Conn()
	sseHeaders(c)
	quiet := quietStart && after == 0
	// A quiet stream's first bytes may wait for the model: its headers go
	// at once, so that its client knows it was accepted.
	c.Response().ImmediateHeaderFlush = quiet
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer s.survive("a stream writer")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := &sseWriter{w: bw, cancel: cancel, last: time.Now(), peer: peer, quiet: quiet}
		defer w.keepAlive(DefaultPingInterval, wire.EventPing, wire.Event{Type: wire.EventPing})()
		fn(ctx, w, after)
	})
	return nil
}

// raw writes one event whose data is already JSON, numbered id (the
// client's Last-Event-ID when it reconnects), and flushes it.
func (s *sseWriter) raw(id int64, name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, err := fmt.Fprintf(s.w, "id: %d\n", id); err != nil {
		return s.fail(err)
	}
	return s.writeLocked(name, data, true)
}
