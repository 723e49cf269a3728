// Package filetype detects the content type of a sandbox file from its name
// and first bytes, and whether it may be shown inline. It is apart from
// package file so that the in-sandbox agent, which uses file but never
// detects types, does not link net/http (a megabyte of its binary and
// about 100 KiB of every idle sandbox's memory).
package filetype

import (
	"net/http"
	"path"
	"strings"
)

// SniffLen is how many leading bytes Detect looks at.
const SniffLen = 512

// Type is the detected content type of a file and whether it may be served
// inline (displayed by the browser rather than downloaded).
type Type struct {
	MIME   string
	Inline bool
}

// byExt maps lower-case extensions to MIME types. It is fixed here rather
// than read from the host's mime.types, so results do not vary by machine.
var byExt = map[string]string{
	".txt": "text/plain", ".log": "text/plain", ".md": "text/markdown",
	".csv": "text/csv", ".tsv": "text/tab-separated-values",
	".json": "application/json", ".jsonl": "application/jsonl",
	".yaml": "application/yaml", ".yml": "application/yaml", ".toml": "application/toml",
	".py": "text/x-python", ".go": "text/x-go", ".sh": "application/x-sh",
	".sql": "application/sql", ".r": "text/x-r", ".ipynb": "application/x-ipynb+json",
	".html": "text/html", ".htm": "text/html", ".xhtml": "application/xhtml+xml",
	".xml": "application/xml", ".svg": "image/svg+xml", ".js": "text/javascript",
	".mjs": "text/javascript", ".css": "text/css",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
	".webp": "image/webp", ".bmp": "image/bmp", ".ico": "image/x-icon", ".tif": "image/tiff",
	".tiff": "image/tiff",
	".pdf":  "application/pdf",
	".zip":  "application/zip", ".gz": "application/gzip", ".tar": "application/x-tar",
	".7z": "application/x-7z-compressed", ".rar": "application/vnd.rar",
	".xlsx":    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".xls":     "application/vnd.ms-excel",
	".docx":    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".doc":     "application/msword",
	".pptx":    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
	".ppt":     "application/vnd.ms-powerpoint",
	".parquet": "application/vnd.apache.parquet", ".sqlite": "application/vnd.sqlite3",
	".db":  "application/vnd.sqlite3",
	".mp3": "audio/mpeg", ".wav": "audio/wav", ".ogg": "audio/ogg", ".flac": "audio/flac",
	".m4a": "audio/mp4", ".mp4": "video/mp4", ".m4v": "video/mp4", ".mov": "video/quicktime",
	".webm": "video/webm", ".heic": "image/heic", ".heif": "image/heif", ".avif": "image/avif",
	".bsl": "text/plain", ".os": "text/plain",
}

// inlineImages are the image types browsers render without running code, and
// the sniffed type their bytes must show.
var inlineBinary = map[string]bool{
	"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true,
	"image/bmp": true, "application/pdf": true,
}

// inlineText are the text types safe to show inline (the server sends them
// with X-Content-Type-Options: nosniff).
var inlineText = map[string]bool{
	"text/plain": true, "text/markdown": true, "text/csv": true,
	"text/tab-separated-values": true, "application/json": true,
	"text/x-python": true, "text/x-go": true, "text/x-r": true,
}

// Detect returns the MIME type of a file from its name and its first bytes
// (up to SniffLen), never from what a client claimed. The name decides when
// its extension is known; otherwise the bytes do. Inline is true only for
// images, PDF and plain text formats whose bytes agree with the name: never
// for HTML, SVG, XML, JavaScript, CSS or anything a browser could run.
func Detect(name string, head []byte) Type {
	if len(head) > SniffLen {
		head = head[:SniffLen]
	}
	sniffed := http.DetectContentType(head)
	sniffedBase, _, _ := strings.Cut(sniffed, ";")
	sniffedBase = strings.TrimSpace(sniffedBase)

	mime, known := byExt[strings.ToLower(path.Ext(name))]
	if !known {
		mime = sniffedBase
		if strings.HasPrefix(mime, "text/plain") && len(head) == 0 {
			mime = "application/octet-stream"
		}
	}
	return Type{MIME: mime, Inline: inline(mime, sniffedBase)}
}

func inline(mime, sniffed string) bool {
	switch {
	case inlineBinary[mime]:
		return sniffed == mime
	case inlineText[mime]:
		// The bytes must look like plain text: text/html or text/xml from
		// the sniffer means markup a browser might interpret.
		return sniffed == "text/plain"
	}
	return false
}
