package web

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// stallListener is lingerListener with a short write stall, for tests.
type stallListener struct {
	net.Listener
	stall time.Duration
}

func (l stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lingerConn{TCPConn: c.(*net.TCPConn), stall: l.stall}, nil
}

// TestStalledStreamReaderIsCut streams a turn of many large events. A
// client that stops reading its answer is cut once it has accepted nothing
// for the write stall, which cancels the turn; a client that reads slowly
// gets the whole answer, however long that takes, and the turn ends on its
// own.
func TestStalledStreamReaderIsCut(t *testing.T) {
	const (
		stall  = 2 * time.Second
		events = 256
	)
	chunk := strings.Repeat("x", 32<<10) // 8 MiB in all: more than the sockets hold
	srv := New(Services{}, slog.New(slog.DiscardHandler), Options{})
	ended := make(chan error, 1)
	app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler, DisableStartupMessage: true})
	app.Post("/turn", func(c *fiber.Ctx) error {
		return srv.answerTurn(c, true, func(ctx context.Context, sink messages.Sink) error {
			err := sink.Send(wire.Event{Type: wire.EventMessageStart})
			for i := 0; err == nil && i < events; i++ {
				err = sink.Send(wire.Event{Type: wire.EventContentBlockDelta, Delta: &wire.BlockDelta{Type: wire.DeltaText, Text: chunk}})
			}
			if err == nil {
				err = sink.Send(wire.Event{Type: wire.EventMessageStop})
			}
			ended <- err
			return err
		}, "test")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(stallListener{ln, stall}) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	request := "POST /turn HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"

	t.Run("a reader that stops is cut", func(t *testing.T) {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		// Nothing is read. Without a write deadline the turn waits for
		// the client for ever; the guard only keeps the test from hanging.
		select {
		case err := <-ended:
			if err == nil {
				t.Fatal("the turn wrote all its events to a client that read none")
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the turn still waits on a client that stopped reading")
		}
	})

	t.Run("a slow reader gets the whole answer", func(t *testing.T) {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		// Reads of 16 KiB with a pause between: far slower than the
		// server writes, never silent for the stall.
		buf := make([]byte, 16<<10)
		var body strings.Builder
		for {
			n, err := resp.Body.Read(buf)
			body.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("after %d bytes: %v", body.Len(), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := <-ended; err != nil {
			t.Fatalf("the turn of a slow reader ended with %v", err)
		}
		got := body.String()
		if n := strings.Count(got, "event: content_block_delta"); n != events || !strings.Contains(got, "event: message_stop") {
			t.Fatalf("the slow reader got %d of %d deltas (stop: %v)", n, events, strings.Contains(got, "event: message_stop"))
		}
	})
}
