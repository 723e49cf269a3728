package web

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestAmbiguousFraming(t *testing.T) {
	cases := []struct {
		name, headers string
		refused       bool
	}{
		{"no body", "Host: x\r\n", false},
		{"content-length", "Host: x\r\nContent-Length: 5\r\n", false},
		{"chunked", "Host: x\r\nTransfer-Encoding: chunked\r\n", false},
		{"chunked in capitals", "Host: x\r\ntransfer-encoding: CHUNKED\r\n", false},
		{"two content-lengths", "Content-Length: 5\r\nContent-Length: 5\r\n", true},
		{"two content-lengths, other case", "Content-Length: 5\r\ncontent-length: 7\r\n", true},
		{"both framings", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", true},
		{"two codings", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", true},
		{"a coding list", "Transfer-Encoding: gzip, chunked\r\n", true},
		{"identity", "Transfer-Encoding: identity\r\n", true},
		{"a near chunked", "Transfer-Encoding: chunkedx\r\n", true},
		{"space before the colon", "Content-Length : 5\r\nContent-Length: 7\r\n", true},
		{"folded line", "X-A: a\r\n Content-Length: 5\r\n", true},
		{"tab-folded line", "X-A: a\r\n\tb\r\n", true},
	}
	for _, tc := range cases {
		if got := ambiguousFraming([]byte(tc.headers + "\r\n")); (got != "") != tc.refused {
			t.Errorf("%s: ambiguousFraming = %q, refused want %v", tc.name, got, tc.refused)
		}
	}
}

// FuzzFramingAgrees: for header lines the guard lets through, fasthttp (the
// server's parser) and net/http (standing in for a proxy in front of it)
// agree on how the body is framed: chunked, or the same length.
func FuzzFramingAgrees(f *testing.F) {
	for _, h := range []string{"Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n", "Content-Length: 5\r\nContent-Length: 6\r\n",
		"Transfer-Encoding: gzip\r\n", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "Content-Length:  7 \r\n", "X: y\r\n z\r\n",
		"Transfer-Encoding: chunked, identity\r\n", "content-length: 0\r\n"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, headers string) {
		raw := "POST / HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n"
		var fh fasthttp.RequestHeader
		if err := fh.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return // fasthttp refuses it: the connection ends with its 400
		}
		if ambiguousFraming(fh.RawHeaders()) != "" {
			return
		}
		nr, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // a strict proxy refuses it
		}
		chunked := len(nr.TransferEncoding) > 0
		switch fl := fh.ContentLength(); {
		case chunked != (fl == -1):
			t.Fatalf("%q: chunked for net/http %v, fasthttp's length %d", headers, chunked, fl)
		case !chunked && max(fl, 0) != int(nr.ContentLength):
			t.Fatalf("%q: length %d for net/http, %d for fasthttp", headers, nr.ContentLength, fl)
		}
	})
}
