package web

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestUnreadBodyIsNoRequest: a body the server refuses before reading it
// (no token, an unknown route) is never read as a request of its own on
// the kept-alive connection — fixed-length or chunked — and the request
// the client sends next on it is answered once. Without finishBody every
// request inside such a body was answered: a smuggled request.
func TestUnreadBodyIsNoRequest(t *testing.T) {
	app := New(Services{}, slog.New(slog.DiscardHandler), Options{}).App()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown()
	smuggled := strings.Repeat("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 2000) // 70 KB: more than fasthttp prefetches
	cases := map[string]struct {
		request string
		status  int
	}{
		"no token, content-length": {fmt.Sprintf("POST /api/v1/app/thread/x/upload-file HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled), 401},
		"no token, chunked":        {fmt.Sprintf("PUT /api/v1/app/thread/x/put-file/a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled), 401},
		"unknown route":            {fmt.Sprintf("POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled), 404},
	}
	for name, tc := range cases {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(conn, tc.request)
		fmt.Fprint(conn, "GET /api/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(conn)
		var answers []string
		for range 2 {
			resp, err := http.ReadResponse(rd, nil)
			if err != nil {
				answers = append(answers, err.Error())
				break
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, fmt.Sprintf("%d %.40s", resp.StatusCode, b))
		}
		conn.Close()
		if len(answers) != 2 || !strings.HasPrefix(answers[0], fmt.Sprint(tc.status)) || !strings.HasPrefix(answers[1], "200 ") || !strings.Contains(answers[1], `"openapi"`) {
			t.Errorf("%s: answered %q, want %d then the OpenAPI document: the refused body's content was read as requests", name, answers, tc.status)
		}
	}
}
