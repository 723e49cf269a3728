package c2pa

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// An MP3 or a FLAC carries its manifest store in a GEOB frame (MIME type
// application/c2pa) of the ID3v2 tag at its start. The data hash leaves
// out the store alone: the tag header and the frame's header and fields
// are hashed.
var geobFields = []byte("\x00application/c2pa\x00c2pa\x00c2pa manifest store\x00")

// mp3Layout is id3Layout for an MP3: without a tag, the file starts with
// an MPEG frame sync.
func mp3Layout(r io.ReaderAt, size int64) (layout, error) {
	return id3Layout(r, size, "an MP3 (no ID3 tag, no MPEG frame sync)", func(b []byte) bool {
		return len(b) >= 2 && b[0] == 0xff && b[1]&0xe0 == 0xe0
	}, false)
}

// flacLayout is id3Layout for a FLAC: the stream after the tag (or the
// file without one) starts with "fLaC". The manifest goes in an ID3v2 tag
// before the stream, as for an MP3.
func flacLayout(r io.ReaderAt, size int64) (layout, error) {
	return id3Layout(r, size, "a FLAC (no fLaC stream marker)", func(b []byte) bool {
		return len(b) >= 4 && string(b[:4]) == "fLaC"
	}, true)
}

// id3Layout reads the ID3v2 tag at the start of an MP3 or a FLAC, if any:
// its frames are kept (C2PA GEOB frames dropped, padding left out) and a
// GEOB frame holding the manifest follows them, the tag's size counting
// it. Without a tag, an ID3v2.4 tag holding the frame alone is put first.
// isAudio checks the bytes where the audio starts (after the tag, when
// checkAfterTag, else only without a tag). A tag using unsynchronisation,
// an extended header or a footer is not rewritten (the file is served as
// written).
func id3Layout(r io.ReaderAt, size int64, what string, isAudio func([]byte) bool, checkAfterTag bool) (layout, error) {
	head := make([]byte, 10)
	n, _ := r.ReadAt(head, 0)
	version := byte(4)
	var frames []span
	audio := int64(0)
	if n == 10 && string(head[:3]) == "ID3" {
		version = head[3]
		if version != 3 && version != 4 {
			return layout{}, fmt.Errorf("%w: ID3v2.%d tag", ErrMalformed, version)
		}
		if head[5]&0xd0 != 0 {
			return layout{}, fmt.Errorf("%w: ID3 tag with unsynchronisation, an extended header or a footer", ErrMalformed)
		}
		body := int64(syncsafe(head[6:10]))
		audio = 10 + body
		if audio > size {
			return layout{}, fmt.Errorf("%w: ID3 tag runs past the end", ErrMalformed)
		}
		off := int64(10)
		from := off
		fh := make([]byte, 10)
		for off+10 <= audio {
			if _, err := r.ReadAt(fh, off); err != nil {
				return layout{}, fmt.Errorf("%w: ID3 frame at %d: %v", ErrMalformed, off, err)
			}
			if fh[0] == 0 { // padding
				break
			}
			fsize := int64(binary.BigEndian.Uint32(fh[4:8]))
			if version == 4 {
				fsize = int64(syncsafe(fh[4:8]))
			}
			end := off + 10 + fsize
			if end > audio {
				return layout{}, fmt.Errorf("%w: ID3 frame %q runs past the tag", ErrMalformed, fh[:4])
			}
			if string(fh[:4]) == "GEOB" {
				mime := make([]byte, min(fsize, 64))
				if _, err := r.ReadAt(mime, off+10); err == nil && bytes.Contains(mime, []byte("c2pa")) {
					frames = append(frames, span{off: from, n: off - from})
					from = end
				}
			}
			off = end
		}
		frames = append(frames, span{off: from, n: off - from})
	} else if !isAudio(head[:n]) {
		return layout{}, fmt.Errorf("%w: not %s", ErrMalformed, what)
	}
	if audio > 0 && checkAfterTag {
		n, _ := r.ReadAt(head[:4], audio)
		if !isAudio(head[:n]) {
			return layout{}, fmt.Errorf("%w: not %s", ErrMalformed, what)
		}
	}
	framesLen := int64(0)
	for _, f := range frames {
		framesLen += f.n
	}
	keep := func(wrapLen int64) []span {
		frameSize := uint32(int64(len(geobFields)) + wrapLen)
		tag := make([]byte, 10)
		copy(tag, "ID3")
		tag[3] = version
		putSyncsafe(tag[6:], uint32(framesLen+10)+frameSize)
		geob := make([]byte, 10, 10+len(geobFields))
		copy(geob, "GEOB")
		if version == 4 {
			putSyncsafe(geob[4:8], frameSize)
		} else {
			binary.BigEndian.PutUint32(geob[4:8], frameSize)
		}
		geob = append(geob, geobFields...)
		out := []span{{off: 0, n: min(audio, 10), lit: tag}}
		out = append(out, frames...)
		out = append(out, span{off: audio, lit: geob}, span{off: audio, n: size - audio})
		return nonEmpty(out)
	}
	insertAt := 10 + framesLen + 10 + int64(len(geobFields))
	return layout{keep: keep, insertAt: insertAt, wrap: func(store []byte) []byte { return store }}, nil
}

// syncsafe decodes an ID3v2 28-bit size (7 bits a byte).
func syncsafe(b []byte) uint32 {
	return uint32(b[0]&0x7f)<<21 | uint32(b[1]&0x7f)<<14 | uint32(b[2]&0x7f)<<7 | uint32(b[3]&0x7f)
}

func putSyncsafe(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>21)&0x7f, byte(v>>14)&0x7f, byte(v>>7)&0x7f, byte(v)&0x7f
}
