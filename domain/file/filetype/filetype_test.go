package filetype

import "testing"

func TestDetect(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	pdf := []byte("%PDF-1.7\n")
	html := []byte("<!DOCTYPE html><html><script>alert(1)</script>")
	tests := []struct {
		name   string
		head   []byte
		mime   string
		inline bool
	}{
		{"chart.png", png, "image/png", true},
		{"CHART.PNG", png, "image/png", true},
		{"report.pdf", pdf, "application/pdf", true},
		{"sales.csv", []byte("a,b\n1,2\n"), "text/csv", true},
		{"notes.txt", []byte("hello"), "text/plain", true},
		{"empty.txt", nil, "text/plain", true},
		{"data.json", []byte(`{"a":1}`), "application/json", true},
		{"page.html", html, "text/html", false},
		{"icon.svg", []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>`), "image/svg+xml", false},
		{"feed.xml", []byte(`<?xml version="1.0"?><a/>`), "application/xml", false},
		{"app.js", []byte("alert(1)"), "text/javascript", false},
		{"style.css", []byte("body{}"), "text/css", false},
		// The name lies: an HTML payload named .png or .txt is never inline.
		{"evil.png", html, "image/png", false},
		{"evil.txt", html, "text/plain", false},
		{"evil.csv", []byte(`<?xml version="1.0"?><x/>`), "text/csv", false},
		// Unknown extensions fall back to the bytes.
		{"blob", png, "image/png", true},
		{"noext", html, "text/html", false},
		{"noext", nil, "application/octet-stream", false},
		{"archive.bin", []byte{0, 1, 2, 3, 0xff}, "application/octet-stream", false},
		{"book.xlsx", []byte("PK\x03\x04"), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", false},
		// Media that downloads sign, by name.
		{"tone.flac", []byte("fLaC"), "audio/flac", false},
		{"clip.mov", nil, "video/quicktime", false},
		{"voice.m4a", nil, "audio/mp4", false},
		{"photo.heic", nil, "image/heic", false},
		{"photo.avif", nil, "image/avif", false},
	}
	for _, tt := range tests {
		got := Detect(tt.name, tt.head)
		if got.MIME != tt.mime || got.Inline != tt.inline {
			t.Errorf("Detect(%q) = %+v, want {%s %v}", tt.name, got, tt.mime, tt.inline)
		}
	}
}
