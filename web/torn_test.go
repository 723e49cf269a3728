package web

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// lockedBuffer is a log destination shared by the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTornUploadIsTheClientsFailure: a client that leaves mid-upload —
// before its Content-Length, or inside a chunk of a chunked body — is
// answered 400 through the one error handler, even when the store wraps
// the read error as its own failure; its body is never taken for complete,
// and the server logs nothing at ERROR or WARN for it (the access log's
// INFO line has the 400).
func TestTornUploadIsTheClientsFailure(t *testing.T) {
	var logged lockedBuffer
	s := &Server{log: slog.New(slog.NewJSONHandler(&logged, nil))}
	app := fiber.New(fiber.Config{StreamRequestBody: true, DisableStartupMessage: true, ErrorHandler: s.errorHandler})
	app.Use(s.accessLog)
	app.Server().Handler = guardRequests(app.Server().Handler, app.Config().RequestMethods)
	read := make(chan error, 1)
	app.Put("/up", func(c *fiber.Ctx) error {
		body := bodyReader(c)
		_, err := io.Copy(io.Discard, body)
		read <- err
		if err != nil {
			// As the host file store reports a failed write.
			return fault.Wrap(fault.Internal, "file storage error", fmt.Errorf("fsroot: write x: %w", err))
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown()

	cases := map[string]string{
		"content-length": fmt.Sprintf("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 1<<20, strings.Repeat("a", 256<<10)),
		"chunked":        fmt.Sprintf("PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s", 1<<20, strings.Repeat("a", 256<<10)),
		// Two whole chunks, and no last one: as Go's client leaves when
		// the body it sends fails.
		"chunked, cut between chunks": fmt.Sprintf("PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n", 64<<10, strings.Repeat("a", 64<<10), 64<<10, strings.Repeat("b", 64<<10)),
	}
	for name, req := range cases {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte(req))
		_ = conn.(*net.TCPConn).CloseWrite() // the client leaves mid-body
		select {
		case err := <-read:
			// Not nil, and not an EOF of any kind, which copy loops (the
			// host file store's among them) take for the end of the input.
			if err == nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				t.Errorf("%s: a torn body read with %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the handler did not finish", name)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		answer, _ := io.ReadAll(conn)
		conn.Close()
		if !bytes.HasPrefix(answer, []byte("HTTP/1.1 400")) {
			t.Errorf("%s: answered %.80q, want 400", name, answer)
		}
	}
	time.Sleep(100 * time.Millisecond) // the access log line follows the answer
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
			t.Errorf("a torn upload was logged as the server's failure: %s", line)
		}
	}
	if n := strings.Count(logged.String(), `"status":400`); n != len(cases) {
		t.Errorf("%d access log lines with status 400, want %d:\n%s", n, len(cases), logged.String())
	}
	// A whole chunked body, its connection kept open for the answer, is
	// read to its end.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(conn, "PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", 64<<10, strings.Repeat("c", 64<<10))
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("a whole chunked body read with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not finish")
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if answer, _ := bufio.NewReader(conn).ReadString('\n'); !strings.HasPrefix(answer, "HTTP/1.1 204") {
		t.Fatalf("a whole chunked body answered %q, want 204", answer)
	}
}
