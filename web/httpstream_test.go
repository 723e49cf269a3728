package web

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

// TestServeStreaming: a net/http handler served through serveStreaming
// reaches the client piece by piece as it flushes, before it returns; a
// client that leaves ends the handler's context; an answer written whole
// is sent with its status and header.
func TestServeStreaming(t *testing.T) {
	s := New(Services{}, slog.New(slog.DiscardHandler), Options{})
	s.keepAlive = 20 * time.Millisecond
	release := make(chan struct{})
	ended := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/whole" {
			w.Header().Set("X-Kind", "whole")
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, "all at once")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "data: second\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // until the client leaves
		close(ended)
	})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/*", func(c *fiber.Ctx) error {
		r, err := http.NewRequestWithContext(context.Background(), c.Method(), c.OriginalURL(), nil)
		if err != nil {
			return err
		}
		return s.serveStreaming(c, h, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	base := "http://" + ln.Addr().String()

	resp, err := http.Get(base + "/whole")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Kind") != "whole" || string(b) != "all at once" {
		t.Fatalf("whole answer: %d %v %q", resp.StatusCode, resp.Header, b)
	}

	resp, err = http.Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	read := func(want string) {
		t.Helper()
		line, err := br.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
		_, _ = br.ReadString('\n') // the blank line ending the event
	}
	// The first event arrives while the handler still waits.
	read("data: first\n")
	close(release)
	read("data: second\n")
	resp.Body.Close()
	// A keep-alive comment finds the client gone and ends the handler's
	// context; the test's deadline bounds the wait.
	<-ended
}
