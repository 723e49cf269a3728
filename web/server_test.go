package web

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestRequestValuesOutliveTheHandler: a value a handler reads from the
// request is its own, unchanged by the requests after it on the same
// connection. Without it the bearer token cached by the JWT codec pointed
// into a reused fasthttp buffer, and one caller could be answered as
// another.
func TestRequestValuesOutliveTheHandler(t *testing.T) {
	// The server's configuration, without its routes.
	app := fiber.New(New(Services{}, slog.New(slog.DiscardHandler), Options{}).App().Config())
	var (
		mu   sync.Mutex
		kept []string
	)
	app.Get("/keep", func(c *fiber.Ctx) error {
		mu.Lock()
		kept = append(kept, c.Get("X-Value"), c.Query("q"))
		mu.Unlock()
		return c.SendStatus(http.StatusNoContent)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	values := []string{"aaaaaaaa", "bbbbbbbb", "cccccccc"}
	for _, v := range values { // one kept-alive connection
		fmt.Fprintf(conn, "GET /keep?q=%s HTTP/1.1\r\nHost: x\r\nX-Value: %s\r\n\r\n", v, v)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, v := range values {
		if kept[2*i] != v || kept[2*i+1] != v {
			t.Fatalf("request %d's header and query became %q and %q after later requests (want %q)", i, kept[2*i], kept[2*i+1], v)
		}
	}
}
