package web

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages/wire"
)

// TestEventStreamHoldsPreamble checks the stream's hand-off: message_start
// and ping wait for the first real event; a turn that fails before it is
// reported to the handler; afterwards each Send returns the write's result.
func TestEventStreamHoldsPreamble(t *testing.T) {
	start := wire.Event{Type: wire.EventMessageStart}
	ping := wire.Event{Type: wire.EventPing}
	block := wire.Event{Type: wire.EventContentBlockStart}

	t.Run("error before output", func(t *testing.T) {
		e := newEventStream(context.Background())
		for _, ev := range []wire.Event{start, ping} {
			if err := e.Send(ev); err != nil {
				t.Fatal(err)
			}
		}
		boom := errors.New("upstream unreachable")
		e.finish(boom)
		select {
		case <-e.committed:
			t.Fatal("committed without output")
		case err := <-e.early:
			if err != boom {
				t.Fatalf("early %v", err)
			}
		}
		if e.commit() {
			t.Fatal("a finished uncommitted stream was committed")
		}
	})

	t.Run("output commits, waits for the writer, and each send is written before it returns", func(t *testing.T) {
		e := newEventStream(context.Background())
		_ = e.Send(start)
		_ = e.Send(ping)
		sent := make(chan error, 1)
		go func() { sent <- e.Send(block) }()
		select {
		case <-e.committed:
		case <-time.After(5 * time.Second):
			t.Fatal("not committed by the first block")
		}
		if pre := e.preamble(); len(pre) != 2 || pre[0].Type != wire.EventMessageStart {
			t.Fatalf("preamble %v", pre)
		}
		select {
		case <-sent:
			t.Fatal("Send returned before the stream's writer was attached")
		case <-time.After(20 * time.Millisecond):
		}
		var buf bytes.Buffer
		e.attach(&sseWriter{w: bufio.NewWriter(&buf), cancel: func() {}, last: time.Now()})
		if err := <-sent; err != nil {
			t.Fatalf("Send returned %v", err)
		}
		if !strings.HasPrefix(buf.String(), "event: content_block_start\ndata: ") {
			t.Fatalf("written %q", buf.String())
		}
		e.finish(nil)
		if err := <-e.end; err != nil {
			t.Fatalf("end %v", err)
		}
	})

	t.Run("a failed write is the send's error and cancels the stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e := newEventStream(ctx)
		writeErr := errors.New("client gone")
		e.attach(&sseWriter{w: bufio.NewWriter(failingWriter{writeErr}), cancel: cancel, last: time.Now()})
		if err := e.Send(block); !errors.Is(err, writeErr) {
			t.Fatalf("Send returned %v", err)
		}
		if ctx.Err() == nil {
			t.Fatal("the stream was not cancelled")
		}
		if err := e.Send(block); err == nil {
			t.Fatal("a send after the failure succeeded")
		}
	})

	t.Run("cancelled stream does not block", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		e := newEventStream(ctx)
		cancel()
		if err := e.Send(block); !errors.Is(err, context.Canceled) {
			t.Fatalf("Send on a cancelled stream: %v", err)
		}
	})
}

// TestSSEKeepAlive checks the keep-alive at given times: a ping once the
// stream was silent for the interval, none before, none after an event;
// and that the running keep-alive ticks.
func TestSSEKeepAlive(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Now()
	w := &sseWriter{w: bufio.NewWriter(&buf), cancel: func() {}, last: t0}
	const ping = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
	data := []byte(`{"type":"ping"}`)
	pings := func() int { return strings.Count(buf.String(), ping) }
	const every = time.Hour
	// Silent for less than the interval: no ping.
	if err := w.tick(t0.Add(every-time.Second), every, "ping", data); err != nil || pings() != 0 {
		t.Fatalf("tick before the interval: %v, %q", err, buf.String())
	}
	// Silent for the interval: one ping, which is a write like any.
	if err := w.tick(t0.Add(every), every, "ping", data); err != nil || pings() != 1 {
		t.Fatalf("tick after the interval: %v, %q", err, buf.String())
	}
	// An event resets the silence.
	if err := w.Event("x", 1); err != nil {
		t.Fatal(err)
	}
	if err := w.tick(time.Now().Add(every-time.Second), every, "ping", data); err != nil || pings() != 1 {
		t.Fatalf("tick after an event: %v, %q", err, buf.String())
	}
	// The running keep-alive ticks by itself.
	buf.Reset()
	stop := w.keepAlive(10*time.Millisecond, "ping", map[string]string{"type": "ping"})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		n := pings()
		w.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no ping from the running keep-alive")
		}
	}
	stop()
}

// failingWriter fails every write with err.
type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// TestEventStreamHoldsUntilFlush checks the stream's bursts: an event
// held reaches the client only with the next event sent, or on Flush.
func TestEventStreamHoldsUntilFlush(t *testing.T) {
	var out bytes.Buffer
	e := newEventStream(context.Background())
	e.attach(&sseWriter{w: bufio.NewWriter(&out), cancel: func() {}, last: time.Now()})
	block := wire.Event{Type: wire.EventContentBlockStart, ContentBlock: &wire.ContentBlock{Type: wire.BlockText}}
	stop := wire.Event{Type: wire.EventContentBlockStop}
	if err := e.Hold(block); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("a held event reached the client: %q", out.String())
	}
	if err := e.Send(stop); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "event: content_block_start\n") || !strings.HasSuffix(got, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n") {
		t.Fatalf("sent %q", got)
	}
	out.Reset()
	if err := e.Hold(stop); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("a held event reached the client: %q", out.String())
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" {
		t.Fatalf("flushed %q", got)
	}
}
