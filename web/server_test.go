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

// TestUnreadBodyIsNoRequest: no byte of a request body is ever read as a
// request of its own on a kept-alive connection, whatever the method (one
// the router knows, one it does not, a lowercase one), the framing
// (Content-Length or chunked) and whoever refused it (the authentication,
// the router, the method check). Each case is answered exactly once and
// the request the client sends next on the connection is answered as
// itself; a request whose framing two parsers could read differently is
// refused with 400 and its connection closed.
func TestUnreadBodyIsNoRequest(t *testing.T) {
	app := New(Services{}, slog.New(slog.DiscardHandler), Options{}).App()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown()
	// 70 KB of requests: more than fasthttp prefetches of a body.
	smuggled := strings.Repeat("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 2000)
	fixed := func(method, path string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", method, path, len(smuggled), smuggled)
	}
	chunked := func(method, path string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", method, path, len(smuggled), smuggled)
	}
	cases := []struct {
		name    string
		request string
		status  int
		closes  bool // the answer ends the connection
	}{
		{"no token, content-length", fixed("POST", "/api/v1/app/thread/x/upload-file"), 401, false},
		{"no token, chunked", chunked("PUT", "/api/v1/app/thread/x/put-file/a.txt"), 401, false},
		{"unknown route", fixed("POST", "/nowhere"), 404, false},
		{"unknown route, chunked", chunked("DELETE", "/nowhere"), 404, false},
		{"unknown method", fixed("PROPFIND", "/api/v1/app/me"), 501, false},
		{"unknown method, chunked", chunked("BREW", "/coffee"), 501, false},
		{"lowercase method", fixed("get", "/healthz"), 501, false},
		{"lowercase method, chunked", chunked("post", "/v1/messages"), 501, false},
		{"body on a GET", fixed("GET", "/api/openapi.json"), 200, false},
		{"two content-lengths", "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nContent-Length: 0\r\n\r\n" + smuggled, 400, true},
		{"content-length and chunked", "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 400, true},
		{"transfer-encoding not chunked", "POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n" + smuggled, 400, true},
		{"transfer-encoding list", "POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n" + smuggled, 400, true},
		{"two transfer-encodings", "POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + smuggled, 400, true},
		{"folded header", "POST /nowhere HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Content-Length: 5\r\nContent-Length: 40\r\n\r\n" + smuggled, 400, true},
	}
	for _, tc := range cases {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(conn, tc.request)
		fmt.Fprint(conn, "GET /api/openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(conn)
		var answers []string
		for range 3 {
			resp, err := http.ReadResponse(rd, nil)
			if err != nil {
				answers = append(answers, "end: "+err.Error())
				break
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, fmt.Sprintf("%d %.60s", resp.StatusCode, b))
		}
		conn.Close()
		want := fmt.Sprintf("%d then the OpenAPI document then the end", tc.status)
		ok := len(answers) == 3 && strings.HasPrefix(answers[0], fmt.Sprint(tc.status)) &&
			strings.HasPrefix(answers[1], "200 ") && strings.Contains(answers[1], `"openapi"`) && strings.HasPrefix(answers[2], "end: ")
		if tc.closes {
			want = fmt.Sprintf("%d then the end of the connection", tc.status)
			ok = len(answers) == 2 && strings.HasPrefix(answers[0], fmt.Sprint(tc.status)) && strings.HasPrefix(answers[1], "end: ")
		}
		if ok && !tc.closes && tc.status >= 400 && !strings.Contains(answers[0], `"type":"error"`) {
			ok, want = false, want+" (the refusal in the error envelope)"
		}
		if !ok {
			t.Errorf("%s: answered %q, want %s", tc.name, answers, want)
		}
	}
}
