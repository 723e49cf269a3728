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
			keep = append(keep, span{keepFrom, off - keepFrom})
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
	keep = append(keep, span{keepFrom, size - keepFrom})
	return layout{keep: nonEmpty(keep), insertAt: insertAt, wrap: pngChunk}, nil
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
				keep = append(keep, span{keepFrom, off - keepFrom})
				keepFrom = off + n
			}
		}
		off += n
	}
	keep = append(keep, span{keepFrom, size - keepFrom})
	return layout{keep: nonEmpty(keep), insertAt: insertAt, wrap: jpegSegments}, nil
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
		if x.n > 0 {
			out = append(out, x)
		}
	}
	return out
}
