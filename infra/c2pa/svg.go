package c2pa

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
)

// SVG carries its manifest store as base64 text in a c2pa:manifest
// element of the last metadata element of the root svg element. The data hash
// leaves out the base64 text only: the elements around it are hashed.
var (
	svgPrefix = []byte(`<metadata><c2pa:manifest xmlns:c2pa="http://c2pa.org/manifest">`)
	svgSuffix = []byte(`</c2pa:manifest></metadata>`)
)

// svgHead is how far into an SVG its root start tag is looked for.
const svgHead = 256 << 10

// svgLayout checks the SVG's root is a plain svg element with content
// (after the prolog: XML declaration, comments, processing instructions,
// a doctype) and puts the manifest in a metadata element just before the
// root's end tag: readers take the last metadata child of the root as the
// manifest's place. An SVG that already carries a c2pa:manifest is not
// signed.
func svgLayout(r io.ReaderAt, size int64) (layout, error) {
	head := make([]byte, min(size, svgHead))
	if _, err := r.ReadAt(head, 0); err != nil && err != io.EOF {
		return layout{}, fmt.Errorf("%w: SVG: %v", ErrMalformed, err)
	}
	rootEnd, err := svgRootEnd(head)
	if err != nil {
		return layout{}, err
	}
	tailOff := max(rootEnd, size-svgHead)
	tail := make([]byte, size-tailOff)
	if _, err := r.ReadAt(tail, tailOff); err != nil && err != io.EOF {
		return layout{}, fmt.Errorf("%w: SVG: %v", ErrMalformed, err)
	}
	i := bytes.LastIndex(tail, []byte("</svg"))
	if i < 0 {
		return layout{}, fmt.Errorf("%w: the SVG root element is not closed", ErrMalformed)
	}
	after := bytes.TrimLeft(tail[i+5:], " \t\r\n")
	if len(after) == 0 || after[0] != '>' || len(bytes.TrimSpace(after[1:])) > 0 && !bytes.HasPrefix(bytes.TrimSpace(after[1:]), []byte("<!--")) {
		return layout{}, fmt.Errorf("%w: the SVG root element is not closed last", ErrMalformed)
	}
	if hasManifest, err := svgContains(r, size, []byte("c2pa:manifest")); err != nil || hasManifest {
		return layout{}, fmt.Errorf("%w: the SVG already carries a C2PA manifest", ErrMalformed)
	}
	end := tailOff + int64(i)
	keep := []span{
		{off: 0, n: end},
		{off: end, lit: svgPrefix},
		{off: end, lit: svgSuffix},
		{off: end, n: size - end},
	}
	return layout{keep: fixed(nonEmpty(keep)), insertAt: end + int64(len(svgPrefix)), wrap: svgText}, nil
}

// svgText is the manifest store as base64 text.
func svgText(store []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(store))
}

// svgRootEnd returns the offset just after the root svg start tag's ">".
func svgRootEnd(b []byte) (int64, error) {
	i := 0
	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		i = 3
	}
	for {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
			i++
		}
		rest := b[i:]
		switch {
		case bytes.HasPrefix(rest, []byte("<?")):
			j := bytes.Index(rest, []byte("?>"))
			if j < 0 {
				return 0, fmt.Errorf("%w: SVG processing instruction not closed", ErrMalformed)
			}
			i += j + 2
		case bytes.HasPrefix(rest, []byte("<!--")):
			j := bytes.Index(rest, []byte("-->"))
			if j < 0 {
				return 0, fmt.Errorf("%w: SVG comment not closed", ErrMalformed)
			}
			i += j + 3
		case bytes.HasPrefix(rest, []byte("<!DOCTYPE")):
			depth, j := 0, 0
			for j = 0; j < len(rest); j++ {
				if rest[j] == '[' {
					depth++
				} else if rest[j] == ']' {
					depth--
				} else if rest[j] == '>' && depth == 0 {
					break
				}
			}
			if j == len(rest) {
				return 0, fmt.Errorf("%w: SVG doctype not closed", ErrMalformed)
			}
			i += j + 1
		case bytes.HasPrefix(rest, []byte("<svg")) && len(rest) > 4 && bytes.IndexByte([]byte(" \t\r\n>"), rest[4]) >= 0:
			var quote byte
			for j := 4; j < len(rest); j++ {
				c := rest[j]
				switch {
				case quote != 0:
					if c == quote {
						quote = 0
					}
				case c == '"' || c == '\'':
					quote = c
				case c == '>':
					if rest[j-1] == '/' {
						return 0, fmt.Errorf("%w: the SVG is empty", ErrMalformed)
					}
					return int64(i + j + 1), nil
				}
			}
			return 0, fmt.Errorf("%w: SVG root start tag not closed", ErrMalformed)
		default:
			return 0, fmt.Errorf("%w: no svg root element", ErrMalformed)
		}
	}
}

// svgContains reports whether the file holds needle anywhere.
func svgContains(r io.ReaderAt, size int64, needle []byte) (bool, error) {
	buf := make([]byte, 64<<10)
	var off int64
	for off < size {
		n, err := r.ReadAt(buf, off)
		if n == 0 && err != nil {
			return false, err
		}
		if bytes.Contains(buf[:n], needle) {
			return true, nil
		}
		if off+int64(n) >= size {
			break
		}
		off += int64(n - len(needle)) // overlap: a needle across two reads
	}
	return false, nil
}
