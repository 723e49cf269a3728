package c2pa

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// pngLayout walks a PNG's chunks: the manifest goes in a caBX chunk right
// after IHDR, and caBX chunks already there are dropped.
func pngLayout(r io.ReaderAt, size int64) (layout, error) {
	head := make([]byte, 8)
	if _, err := r.ReadAt(head, 0); err != nil || !bytes.Equal(head, pngMagic) {
		return layout{}, fmt.Errorf("%w: not a PNG", ErrMalformed)
	}
	var keep []span
	keepFrom, off := int64(0), int64(8)
	var insertAt int64 = -1
	hdr := make([]byte, 8)
	for off < size {
		if _, err := r.ReadAt(hdr, off); err != nil {
			return layout{}, fmt.Errorf("%w: PNG chunk at %d: %v", ErrMalformed, off, err)
		}
		n := int64(binary.BigEndian.Uint32(hdr)) + 12
		typ := string(hdr[4:8])
		if off+n > size {
			return layout{}, fmt.Errorf("%w: PNG chunk %q runs past the end", ErrMalformed, typ)
		}
		switch {
		case off == 8 && typ != "IHDR":
			return layout{}, fmt.Errorf("%w: PNG does not start with IHDR", ErrMalformed)
		case off == 8:
			insertAt = off + n
		case typ == "caBX":
			keep = append(keep, span{off: keepFrom, n: off - keepFrom})
			keepFrom = off + n
		}
		off += n
		if typ == "IEND" {
			break
		}
	}
	if insertAt < 0 {
		return layout{}, fmt.Errorf("%w: PNG has no IHDR", ErrMalformed)
	}
	keep = append(keep, span{off: keepFrom, n: size - keepFrom})
	return layout{keep: fixed(nonEmpty(keep)), insertAt: insertAt, wrap: pngChunk}, nil
}

// pngChunk wraps a manifest store in a caBX chunk.
func pngChunk(store []byte) []byte {
	out := make([]byte, 8, len(store)+12)
	binary.BigEndian.PutUint32(out, uint32(len(store)))
	copy(out[4:], "caBX")
	out = append(out, store...)
	crc := crc32.NewIEEE()
	crc.Write(out[4:])
	return binary.BigEndian.AppendUint32(out, crc.Sum32())
}

// jpegLayout walks a JPEG's marker segments up to the start of scan: the
// manifest goes in APP11 segments after SOI (and after a leading APP0
// JFIF segment), and APP11 JUMBF segments already there are dropped.
func jpegLayout(r io.ReaderAt, size int64) (layout, error) {
	hdr := make([]byte, 4)
	if _, err := r.ReadAt(hdr[:2], 0); err != nil || hdr[0] != 0xFF || hdr[1] != 0xD8 {
		return layout{}, fmt.Errorf("%w: not a JPEG", ErrMalformed)
	}
	var keep []span
	keepFrom, off := int64(0), int64(2)
	insertAt := int64(2)
	ci := make([]byte, 2)
	for {
		if off+4 > size {
			return layout{}, fmt.Errorf("%w: JPEG ends before its scan", ErrMalformed)
		}
		if _, err := r.ReadAt(hdr, off); err != nil {
			return layout{}, fmt.Errorf("%w: JPEG marker at %d: %v", ErrMalformed, off, err)
		}
		if hdr[0] != 0xFF {
			return layout{}, fmt.Errorf("%w: no JPEG marker at %d", ErrMalformed, off)
		}
		m := hdr[1]
		if m == 0xFF { // fill byte
			off++
			continue
		}
		if m == 0x01 || (m >= 0xD0 && m <= 0xD7) { // no length
			off += 2
			continue
		}
		if m == 0xD9 || m == 0xDA { // EOI, SOS: the header ends
			break
		}
		n := int64(binary.BigEndian.Uint16(hdr[2:])) + 2
		if n < 4 || off+n > size {
			return layout{}, fmt.Errorf("%w: JPEG segment at %d runs past the end", ErrMalformed, off)
		}
		switch {
		case m == 0xE0 && off == 2:
			insertAt = off + n
		case m == 0xEB && n >= 6:
			if _, err := r.ReadAt(ci, off+4); err == nil && string(ci) == "JP" {
				keep = append(keep, span{off: keepFrom, n: off - keepFrom})
				keepFrom = off + n
			}
		}
		off += n
	}
	keep = append(keep, span{off: keepFrom, n: size - keepFrom})
	return layout{keep: fixed(nonEmpty(keep)), insertAt: insertAt, wrap: jpegSegments}, nil
}

// jpegSegment is the most JUMBF payload one APP11 segment carries: 65535
// less the length field, CI, En, Z and the repeated box header.
const jpegSegment = 65535 - 2 - 2 - 2 - 4 - 8

// jpegSegments wraps a manifest store in APP11 segments (JPEG XT boxes,
// ISO 19566-5): each carries CI "JP", box instance 1, its sequence number
// from 1, the superbox's size and type, then the next part of its payload.
func jpegSegments(store []byte) []byte {
	boxHead, payload := store[:8], store[8:]
	var out []byte
	for seq := uint32(1); len(payload) > 0 || seq == 1; seq++ {
		n := min(len(payload), jpegSegment)
		out = append(out, 0xFF, 0xEB)
		out = binary.BigEndian.AppendUint16(out, uint16(2+2+2+4+8+n))
		out = append(out, 'J', 'P', 0, 1)
		out = binary.BigEndian.AppendUint32(out, seq)
		out = append(out, boxHead...)
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

func nonEmpty(s []span) []span {
	out := s[:0]
	for _, x := range s {
		if x.size() > 0 {
			out = append(out, x)
		}
	}
	return out
}

// gifApp is the start of the C2PA application extension of a GIF:
// extension introducer, application label, block size 11, identifier
// "C2PA_GIF" and authentication code 01 00 00.
var gifApp = []byte("\x21\xff\x0bC2PA_GIF\x01\x00\x00")

// gifLayout reads a GIF's header, logical screen descriptor and global
// color table, then walks the extensions before the first image: the
// manifest goes in a C2PA_GIF application extension right after the
// color table, and such extensions already there are dropped. A GIF87a
// header becomes GIF89a, the version with extensions.
func gifLayout(r io.ReaderAt, size int64) (layout, error) {
	head := make([]byte, 13)
	if _, err := r.ReadAt(head, 0); err != nil || (string(head[:6]) != "GIF87a" && string(head[:6]) != "GIF89a") {
		return layout{}, fmt.Errorf("%w: not a GIF", ErrMalformed)
	}
	off := int64(13)
	if head[10]&0x80 != 0 {
		off += 3 << ((head[10] & 0x07) + 1)
	}
	if off > size {
		return layout{}, fmt.Errorf("%w: GIF color table runs past the end", ErrMalformed)
	}
	insertAt := off
	keep := []span{{off: 0, n: 6, lit: []byte("GIF89a")}}
	keepFrom := int64(6)
	b := make([]byte, 14)
	for off < size {
		if _, err := r.ReadAt(b[:1], off); err != nil {
			return layout{}, fmt.Errorf("%w: GIF block at %d: %v", ErrMalformed, off, err)
		}
		if b[0] != 0x21 { // an image or the trailer: the header ends
			break
		}
		start := off
		n, err := r.ReadAt(b, off)
		if n < 3 {
			return layout{}, fmt.Errorf("%w: GIF extension at %d: %v", ErrMalformed, off, err)
		}
		isC2PA := n == 14 && bytes.Equal(b[:11], gifApp[:11])
		off += 2
		for { // the extension's sub-blocks, to the empty one
			if _, err := r.ReadAt(b[:1], off); err != nil {
				return layout{}, fmt.Errorf("%w: GIF extension at %d runs past the end", ErrMalformed, start)
			}
			off += 1 + int64(b[0])
			if b[0] == 0 {
				break
			}
			if off > size {
				return layout{}, fmt.Errorf("%w: GIF extension at %d runs past the end", ErrMalformed, start)
			}
		}
		if isC2PA {
			keep = append(keep, span{off: keepFrom, n: start - keepFrom})
			keepFrom = off
		}
	}
	keep = append(keep, span{off: keepFrom, n: size - keepFrom})
	return layout{keep: fixed(nonEmpty(keep)), insertAt: insertAt, wrap: gifExtension}, nil
}

// gifExtension wraps a manifest store in a C2PA_GIF application
// extension: sub-blocks of at most 255 bytes, then an empty one.
func gifExtension(store []byte) []byte {
	out := append([]byte{}, gifApp...)
	for len(store) > 0 {
		n := min(len(store), 255)
		out = append(out, byte(n))
		out = append(out, store[:n]...)
		store = store[n:]
	}
	return append(out, 0)
}

// wavLayout is riffLayout for a WAV.
func wavLayout(r io.ReaderAt, size int64) (layout, error) { return riffLayout(r, size, "WAVE") }

// webpLayout is riffLayout for a WebP.
func webpLayout(r io.ReaderAt, size int64) (layout, error) { return riffLayout(r, size, "WEBP") }

// riffLayout walks a RIFF file's chunks (a WAV, a WebP): the manifest goes
// in a C2PA chunk at the end, C2PA chunks already there are dropped, and
// the RIFF size counts the new chunk. A simple WebP (a lone VP8 or VP8L
// chunk) gets the VP8X header the extended format needs for more chunks.
func riffLayout(r io.ReaderAt, size int64, form string) (layout, error) {
	head := make([]byte, 12)
	if _, err := r.ReadAt(head, 0); err != nil || string(head[:4]) != "RIFF" || string(head[8:12]) != form {
		return layout{}, fmt.Errorf("%w: not a RIFF %s", ErrMalformed, form)
	}
	var drop []span
	var vp8x []byte
	off := int64(12)
	end := min(size, int64(binary.LittleEndian.Uint32(head[4:8]))+8)
	hdr := make([]byte, 8)
	for off+8 <= end {
		if _, err := r.ReadAt(hdr, off); err != nil {
			return layout{}, fmt.Errorf("%w: RIFF chunk at %d: %v", ErrMalformed, off, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[4:])) + 8
		n += n & 1
		if off+n > size {
			return layout{}, fmt.Errorf("%w: RIFF chunk %q runs past the end", ErrMalformed, hdr[:4])
		}
		if off == 12 && form == "WEBP" {
			var err error
			if vp8x, err = webpExtended(r, string(hdr[:4]), off+8, n-8); err != nil {
				return layout{}, err
			}
		}
		if string(hdr[:4]) == "C2PA" {
			drop = append(drop, span{off: off, n: n})
		}
		off += n
	}
	if off != end {
		return layout{}, fmt.Errorf("%w: RIFF chunks do not fill the RIFF size", ErrMalformed)
	}
	// The RIFF body ends at end; bytes after it (rare) stay after the
	// manifest.
	kept := end + int64(len(vp8x))
	for _, d := range drop {
		kept -= d.n
	}
	keep := func(wrapLen int64) []span {
		riff := make([]byte, 12)
		copy(riff, "RIFF")
		binary.LittleEndian.PutUint32(riff[4:], uint32(kept-8+wrapLen))
		copy(riff[8:], form)
		out := []span{{off: 0, n: 12, lit: riff}}
		if vp8x != nil {
			out = append(out, span{off: 12, lit: vp8x})
		}
		from := int64(12)
		for _, d := range drop {
			out = append(out, span{off: from, n: d.off - from})
			from = d.off + d.n
		}
		out = append(out, span{off: from, n: end - from})
		if end < size {
			out = append(out, span{off: end, n: size - end})
		}
		return nonEmpty(out)
	}
	return layout{keep: keep, insertAt: kept, wrap: riffChunk, even: true}, nil
}

// webpExtended returns the VP8X chunk a simple WebP whose first chunk is
// typ (payload at off, n bytes) needs, or nil when it is extended
// already: the canvas size from the bitstream's header, and the alpha
// flag of a lossless image that uses alpha.
func webpExtended(r io.ReaderAt, typ string, off, n int64) ([]byte, error) {
	var w, h uint32
	var flags byte
	b := make([]byte, 10)
	switch typ {
	case "VP8X":
		return nil, nil
	case "VP8 ":
		if n < 10 {
			return nil, fmt.Errorf("%w: short VP8 chunk", ErrMalformed)
		}
		if _, err := r.ReadAt(b, off); err != nil || b[3] != 0x9d || b[4] != 0x01 || b[5] != 0x2a {
			return nil, fmt.Errorf("%w: VP8 frame header", ErrMalformed)
		}
		w = uint32(binary.LittleEndian.Uint16(b[6:])) & 0x3fff
		h = uint32(binary.LittleEndian.Uint16(b[8:])) & 0x3fff
	case "VP8L":
		if n < 5 {
			return nil, fmt.Errorf("%w: short VP8L chunk", ErrMalformed)
		}
		if _, err := r.ReadAt(b[:5], off); err != nil || b[0] != 0x2f {
			return nil, fmt.Errorf("%w: VP8L signature", ErrMalformed)
		}
		bits := binary.LittleEndian.Uint32(b[1:5])
		w, h = bits&0x3fff+1, (bits>>14)&0x3fff+1
		if bits&(1<<28) != 0 {
			flags |= 0x10
		}
	default:
		return nil, fmt.Errorf("%w: WebP starts with chunk %q", ErrMalformed, typ)
	}
	if w == 0 || h == 0 {
		return nil, fmt.Errorf("%w: WebP of no size", ErrMalformed)
	}
	c := make([]byte, 18)
	copy(c, "VP8X")
	binary.LittleEndian.PutUint32(c[4:], 10)
	c[8] = flags
	c[12], c[13], c[14] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	c[15], c[16], c[17] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	return c, nil
}

// riffChunk wraps a manifest store in a RIFF chunk "C2PA" (the layout
// keeps the store's length even, so the chunk needs no pad byte).
func riffChunk(store []byte) []byte {
	out := make([]byte, 8, len(store)+9)
	copy(out, "C2PA")
	binary.LittleEndian.PutUint32(out[4:], uint32(len(store)))
	return append(out, store...)
}
