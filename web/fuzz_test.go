package web

import (
	"mime"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseRange: a range that is honoured lies inside the file and is not
// empty.
func FuzzParseRange(f *testing.F) {
	for _, h := range []string{"bytes=0-99", "bytes=-5", "bytes=5-", "bytes=9-3", "bytes=0-0,2-3", "bytes=-0", "bytes= 1-2 ",
		"bytes=99999999999999999999-", "bytes=-9223372036854775807", "bytes=+1-2", "items=1-2", "bytes=1"} {
		f.Add(h, int64(100))
		f.Add(h, int64(0))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -(size + 1)
		}
		start, length, ok, satisfiable := parseRange(h, size)
		if !ok && satisfiable {
			t.Fatalf("parseRange(%q, %d): satisfiable but ignored", h, size)
		}
		if ok && satisfiable && (start < 0 || length < 1 || start > size-length) {
			t.Fatalf("parseRange(%q, %d) = %d+%d: outside the file", h, size, start, length)
		}
	})
}

// FuzzContentDisposition: any file name makes one header value of
// printable ASCII (no header splitting) whose filename* decodes to the
// name itself.
func FuzzContentDisposition(f *testing.F) {
	for _, n := range []string{"report.pdf", `a"b\c.txt`, "100%.csv", "résumé.docx", "a\r\nSet-Cookie: x=y", "\x00", "数据.xlsx", ""} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		h := contentDisposition("attachment", name)
		for i := 0; i < len(h); i++ {
			if h[i] < 0x20 || h[i] > 0x7e {
				t.Fatalf("contentDisposition(%q) = %q: byte %#x", name, h, h[i])
			}
		}
		_, params, err := mime.ParseMediaType(h)
		if err != nil {
			t.Fatalf("contentDisposition(%q) = %q: %v", name, h, err)
		}
		// mime decodes filename* itself; without it (invalid UTF-8) the
		// raw value must still unescape to the name.
		if got, ok := params["filename"]; ok && strings.Contains(h, "filename*=") {
			ext := h[strings.Index(h, "filename*=UTF-8''")+len("filename*=UTF-8''"):]
			if raw, err := url.PathUnescape(ext); err != nil || raw != name {
				t.Fatalf("contentDisposition(%q): filename* is %q (%q, %v)", name, ext, got, err)
			}
		}
	})
}
