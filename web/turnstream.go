package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// DefaultPingInterval is how long a turn's stream may stay silent before a
// ping event is sent; pings also detect clients that went away while a
// long command runs.
const DefaultPingInterval = 2 * time.Second

// maxHold is how long a stream's preamble may be held waiting for the
// model's first output, so that an upstream that fails (after the adapter's
// retries) is answered with its HTTP status rather than an error event.
// It exceeds messages.DefaultStartWait, so that a stream opened at maxHold
// has its message_start.
const maxHold = 10 * time.Second

// runFunc runs a turn, sending its events to sink.
type runFunc func(ctx context.Context, sink messages.Sink) error

// answerTurn answers a turn — a Messages API request or a chat turn, the
// one streaming contract of both — as one JSON response or, with stream,
// as its event stream. what names the turn's kind in logs.
//
// Without stream the turn runs in the handler, cancelled when the client
// closes its connection (fasthttp does not cancel a handler: watchPeer).
//
// With stream the turn runs in its own goroutine. The stream's preamble
// (message_start, ping) is held until the model's first output, an error
// or maxHold: an error before then is answered as a plain HTTP error (503
// for an unreachable upstream). Afterwards each event is written and
// flushed before the turn goes on; a failed write (the client went away)
// cancels the turn's context, which stops the model call and kills a
// running command; an error mid-stream ends it with an error event.
func (s *Server) answerTurn(c *fiber.Ctx, stream bool, run runFunc, what string) error {
	if !stream {
		ctx, cancel := context.WithCancel(c.UserContext())
		defer cancel()
		defer watchPeer(c.Context().Conn(), DefaultPingInterval/2, cancel)()
		var col messages.Collector
		if err := run(ctx, &col); err != nil {
			return s.turnError(c, what, err)
		}
		// Encoded by the response's own encoder, once: c.JSON would scan
		// its output again to compact it.
		body, err := col.Response().MarshalJSON()
		if err != nil {
			return err
		}
		c.Response().SetBodyRaw(body)
		c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		return nil
	}
	// The request's context, not the handler's: it lives on after the
	// handler returns (Background, or a sandbox token's bound).
	ctx, cancel := context.WithCancel(c.UserContext())
	st := newEventStream(ctx)
	log := s.log
	s.turnRunner.run(func() {
		var err error
		defer func() {
			if r := recover(); r != nil { // a panic fails the turn, not the server
				log.Error("panic in a streamed turn", "turn", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = errors.New("internal error")
			}
			st.finish(err)
		}()
		err = run(ctx, st)
	})
	wait := time.NewTimer(maxHold)
	defer wait.Stop()
	// Nothing is written while the preamble is held: watch the connection.
	stopWatch := watchPeer(c.Context().Conn(), DefaultPingInterval/2, cancel)
	defer stopWatch()
	// A stream committed by the turn's first event writes the preamble
	// with that event; one committed because the turn took its time sends
	// the preamble at once.
	flushPreamble := false
	select {
	case <-st.committed:
	case err := <-st.early:
		cancel()
		return s.turnError(c, what, err)
	case <-wait.C:
		if !st.commit() {
			cancel()
			return s.turnError(c, what, <-st.early)
		}
		flushPreamble = true
	}
	peer := c.Context().Conn()
	sseHeaders(c)
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer s.survive("a stream writer")
		defer cancel()
		w := &sseWriter{w: bw, cancel: cancel, last: time.Now(), peer: peer}
		stop := w.keepAlive(DefaultPingInterval, wire.EventPing, wire.Event{Type: wire.EventPing})
		defer stop()
		for _, ev := range st.preamble() {
			if w.Hold(ev.Type, ev) != nil {
				return
			}
		}
		if flushPreamble && w.Flush() != nil {
			return
		}
		// From here the turn writes its events itself, under the
		// writer's lock, until it ends: this goroutine only waits.
		st.attach(w)
		if err := <-st.end; err != nil && ctx.Err() == nil {
			ev := s.errorEvent(what, err)
			_ = w.Event(ev.Type, ev)
		}
	})
	return nil
}

// watchPeer cancels a non-streamed turn when its client closes the
// connection (checked every interval; nothing is written), so that the
// model call and a running command stop. The returned function ends the
// watch and waits for it.
func watchPeer(conn net.Conn, every time.Duration, cancel context.CancelFunc) (stop func()) {
	if conn == nil || every <= 0 {
		return func() {}
	}
	// A timer rather than a goroutine: a turn that ends before the first
	// check costs no goroutine and no wake-up. mu keeps a check from
	// touching conn once stop has returned.
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if peerClosed(conn) {
			cancel()
			return
		}
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// eventStream is the Sink of a streamed turn: it holds the preamble until
// the stream is committed, then writes each event through the stream's
// writer once the response's stream has begun (attach), and returns when
// it was written and flushed. The turn writes in its own goroutine: handing
// each event to the stream's goroutine and waiting for its answer were two
// goroutine switches per event, a tenth of a streamed answer's CPU.
type eventStream struct {
	ctx context.Context

	mu       sync.Mutex
	isCommit bool
	finished bool
	pre      []wire.Event
	w        *sseWriter // the stream's writer, once attached

	committed chan struct{} // closed on commit
	attached  chan struct{} // closed once w is set
	end       chan error    // Run's result, once committed
	early     chan error    // Run's result, when it ended before commit
}

func newEventStream(ctx context.Context) *eventStream {
	return &eventStream{
		ctx: ctx, committed: make(chan struct{}), attached: make(chan struct{}),
		end: make(chan error, 1), early: make(chan error, 1),
	}
}

// attach hands the stream's writer to the turn, once the preamble is
// written.
func (e *eventStream) attach(w *sseWriter) {
	e.mu.Lock()
	e.w = w
	e.mu.Unlock()
	close(e.attached)
}

// commit opens the stream unless the turn already ended uncommitted; it
// reports whether the stream is committed.
func (e *eventStream) commit() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.commitLocked()
}

func (e *eventStream) commitLocked() bool {
	if e.isCommit {
		return true
	}
	if e.finished {
		return false
	}
	e.isCommit = true
	close(e.committed)
	return true
}

// preamble returns the events held before commit.
func (e *eventStream) preamble() []wire.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	pre := e.pre
	e.pre = nil
	return pre
}

// Send holds the preamble, then writes each event and returns once it was
// written and flushed, with any event held before it.
func (e *eventStream) Send(ev wire.Event) error {
	w, err := e.writer(ev)
	if w == nil {
		return err
	}
	return w.Event(ev.Type, ev)
}

// Hold is Send without the flush (messages.HoldingSink): the turn sends
// or flushes once the events at hand are written.
func (e *eventStream) Hold(ev wire.Event) error {
	w, err := e.writer(ev)
	if w == nil {
		return err
	}
	return w.Hold(ev.Type, ev)
}

// Flush sends on the events Hold wrote.
func (e *eventStream) Flush() error {
	e.mu.Lock()
	w := e.w
	e.mu.Unlock()
	if w == nil {
		return nil // nothing was written yet
	}
	return w.Flush()
}

// writer returns the writer ev is to be written with, once the stream is
// attached, or nil when ev is held in the preamble (err nil) or the stream
// has ended (err says why).
func (e *eventStream) writer(ev wire.Event) (*sseWriter, error) {
	e.mu.Lock()
	if !e.isCommit && (ev.Type == wire.EventMessageStart || ev.Type == wire.EventPing) {
		e.pre = append(e.pre, ev)
		e.mu.Unlock()
		return nil, nil
	}
	e.commitLocked()
	w := e.w
	e.mu.Unlock()
	if w == nil {
		select {
		case <-e.attached:
		case <-e.ctx.Done():
			return nil, fmt.Errorf("messages: stream: %w", e.ctx.Err())
		}
		e.mu.Lock()
		w = e.w
		e.mu.Unlock()
	}
	if err := e.ctx.Err(); err != nil {
		return nil, fmt.Errorf("messages: stream: %w", err)
	}
	return w, nil
}

// finish reports Run's result to the writer, or to the handler when the
// stream was never committed.
func (e *eventStream) finish(err error) {
	e.mu.Lock()
	e.finished = true
	committed := e.isCommit
	e.mu.Unlock()
	if committed {
		e.end <- err
		return
	}
	e.early <- err
}

// turnRunner runs streamed turns on goroutines kept between turns. A
// turn's calls go deep (the loop, the model adapter, the JSON encoders):
// on a goroutine of its own each turn grew its stack several times over,
// copying it each time, a twentieth of a streamed request's CPU. A kept
// goroutine has its stack grown already. One waits turnIdle for the next
// turn and then ends, so that a quiet server keeps none.
type turnRunner struct {
	work chan func()
}

// turnIdle is how long a turn's goroutine waits for the next turn.
const turnIdle = time.Second

func newTurnRunner() *turnRunner {
	return &turnRunner{work: make(chan func())}
}

// run runs fn on a waiting goroutine, or on a new one when none waits (or
// r is nil). fn must not panic.
func (r *turnRunner) run(fn func()) {
	if r == nil {
		go fn()
		return
	}
	select {
	case r.work <- fn:
	default:
		go r.loop(fn)
	}
}

func (r *turnRunner) loop(fn func()) {
	idle := time.NewTimer(turnIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(turnIdle)
		select {
		case fn = <-r.work:
		case <-idle.C:
			return
		}
	}
}
