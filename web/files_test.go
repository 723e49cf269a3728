package web

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		h               string
		size            int64
		start, length   int64
		ok, satisfiable bool
	}{
		{"bytes=0-9", 100, 0, 10, true, true},
		{"bytes=90-", 100, 90, 10, true, true},
		{"bytes=-10", 100, 90, 10, true, true},
		{"bytes=-1000", 100, 0, 100, true, true},
		{"bytes=50-1000", 100, 50, 50, true, true},
		{"bytes=99-99", 100, 99, 1, true, true},
		{"bytes=100-", 100, 0, 0, true, false},
		{"bytes=-0", 100, 0, 0, true, false},
		{"bytes=0-", 0, 0, 0, true, false},
		{"bytes=-5", 0, 0, 0, true, false},
		{"bytes=9-3", 100, 0, 0, false, false},
		{"bytes=0-1,3-4", 100, 0, 0, false, false},
		{"bytes=+1-2", 100, 0, 0, false, false},
		{"bytes= 1-2", 100, 1, 2, true, true},
		{"bytes=1", 100, 0, 0, false, false},
		{"bytes=a-b", 100, 0, 0, false, false},
		{"items=0-1", 100, 0, 0, false, false},
		{"bytes=99999999999999999999-", 100, 0, 0, false, false},
	}
	for _, tc := range tests {
		start, length, ok, sat := parseRange(tc.h, tc.size)
		if start != tc.start || length != tc.length || ok != tc.ok || sat != tc.satisfiable {
			t.Errorf("parseRange(%q, %d) = %d, %d, %v, %v; want %d, %d, %v, %v", tc.h, tc.size, start, length, ok, sat, tc.start, tc.length, tc.ok, tc.satisfiable)
		}
	}
}

func TestContentDisposition(t *testing.T) {
	tests := []struct{ kind, name, want string }{
		{"attachment", "report.txt", `attachment; filename="report.txt"; filename*=UTF-8''report.txt`},
		{"inline", "a b.png", `inline; filename="a b.png"; filename*=UTF-8''a%20b.png`},
		{"attachment", `x"; filename="evil.html`, `attachment; filename="x_; filename=_evil.html"; filename*=UTF-8''x%22%3B%20filename%3D%22evil.html`},
		{"attachment", "a\r\nSet-Cookie: x", `attachment; filename="a__Set-Cookie: x"; filename*=UTF-8''a%0D%0ASet-Cookie%3A%20x`},
		{"attachment", "отчёт.csv", `attachment; filename="_____.csv"; filename*=UTF-8''%D0%BE%D1%82%D1%87%D1%91%D1%82.csv`},
		{"attachment", `back\slash%41.txt`, `attachment; filename="back_slash_41.txt"; filename*=UTF-8''back%5Cslash%2541.txt`},
		{"attachment", "\xff\xfe", `attachment; filename="__"; filename*=UTF-8''%FF%FE`},
		{"attachment", "", `attachment; filename="download"; filename*=UTF-8''`},
	}
	for _, tc := range tests {
		got := contentDisposition(tc.kind, tc.name)
		if got != tc.want {
			t.Errorf("contentDisposition(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if strings.ContainsAny(got, "\r\n") {
			t.Errorf("CR/LF in %q", got)
		}
		_, ext, _ := strings.Cut(got, "filename*=UTF-8''")
		if dec, err := url.PathUnescape(ext); err != nil || dec != tc.name {
			t.Errorf("filename* of %q decodes to %q, %v", tc.name, dec, err)
		}
	}
}

// TestSendStream checks that a ranged stream of an open file sends exactly
// its length, through WriteTo and through Read, and closes the file.
func TestSendStream(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, viaWriteTo := range []bool{true, false} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Seek(3, io.SeekStart)
		s := newSendStream(f, 4)
		var b bytes.Buffer
		if viaWriteTo {
			_, err = s.WriteTo(&b)
		} else {
			_, err = io.Copy(&b, struct{ io.Reader }{s})
		}
		if err != nil || b.String() != "3456" {
			t.Fatalf("writeTo=%v: %q %v", viaWriteTo, b.String(), err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Read(make([]byte, 1)); err == nil {
			t.Fatal("file not closed")
		}
	}
}

// TestBodyReaderTornUpload: a client that leaves before sending its whole
// Content-Length must not look like a complete body (fasthttp's stream
// reports the closed connection as a plain EOF).
func TestBodyReaderTornUpload(t *testing.T) {
	got := make(chan error, 1)
	app := fiber.New(fiber.Config{StreamRequestBody: true, DisableStartupMessage: true})
	app.Put("/up", func(c *fiber.Ctx) error {
		_, err := io.Copy(io.Discard, bodyReader(c))
		got <- err
		return c.SendStatus(fiber.StatusNoContent)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	defer app.Shutdown()
	send := func(declared, sent int) error {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", declared)
		// More than the server prefetches with the headers, so that the
		// body is streamed.
		_, _ = conn.Write(bytes.Repeat([]byte("a"), sent))
		_ = conn.(*net.TCPConn).CloseWrite()
		select {
		case err := <-got:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the handler did not finish")
		}
		return nil
	}
	if err := send(1<<20, 256<<10); !errors.Is(err, errTornBody) || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a body cut at 256 KiB of 1 MiB read with %v, want errTornBody (and no EOF, which copy loops take for the end)", err)
	}
	if err := send(256<<10, 256<<10); err != nil {
		t.Fatalf("a whole body read with %v", err)
	}
	// The store wraps it as its own failure; it is still the client's.
	stored := fault.Wrap(fault.Internal, "file storage error", fmt.Errorf("fsroot: write x: %w", errTornBody))
	if st, _ := (&Server{}).classify(stored); st != 400 {
		t.Fatalf("a torn upload answered %d, want 400", st)
	}
}

// TestPartFilenameUndoesBrowserEscapes: browsers send a `"` in a file name
// as %22 (and CR, LF as %0D, %0A); the stored name is the user's. Such
// names were once stored with "%22" in them.
func TestPartFilenameUndoesBrowserEscapes(t *testing.T) {
	tests := []struct{ sent, want string }{
		{`report.csv`, `report.csv`},
		{`say %22hi%22.txt`, `say "hi".txt`},
		{`two%0Alines.txt`, "two\nlines.txt"},
		{`100%.txt`, `100%.txt`},
	}
	for _, tt := range tests {
		var body bytes.Buffer
		w := multipart.NewWriter(&body)
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+tt.sent+`"`)
		pw, _ := w.CreatePart(h)
		pw.Write([]byte("x"))
		w.Close()
		part, err := multipart.NewReader(&body, w.Boundary()).NextPart()
		if err != nil {
			t.Fatal(err)
		}
		if got := partFilename(part); got != tt.want {
			t.Errorf("sent %q: stored as %q, want %q", tt.sent, got, tt.want)
		}
	}
}
