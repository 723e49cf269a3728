package c2pa

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

// A BMFF file (MP4, MOV, M4A, HEIC, AVIF) carries its manifest store in a
// top-level uuid box right after ftyp: the C2PA UUID, version and flags
// 0, the purpose "manifest", a 64-bit offset to a Merkle box (0, none),
// then the store. Its hard binding is a BMFF hash: the top-level boxes in
// order, each box's file offset hashed before it, leaving out the C2PA
// box, ftyp, mfra, free and skip.
//
// The box shifts every byte after ftyp, so the absolute offsets the file
// keeps are rewritten in the signed form: chunk offsets (stco, co64),
// auxiliary information offsets (saio) of the sample tables, item
// locations (iloc) of the top-level meta box, fragment base offsets
// (tfhd) and fragment random access entries (tfra). Only those boxes are
// held in memory; the rest streams from the stored file.

// c2paBoxUUID is the extended type of the C2PA box.
var c2paBoxUUID = []byte{0xd8, 0xfe, 0xc3, 0xd6, 0x1b, 0x0e, 0x48, 0x3c, 0x92, 0x97, 0x58, 0x28, 0x87, 0x7e, 0xc4, 0x81}

// bmffBoxHead is the C2PA box's bytes before the store: size, "uuid", the
// C2PA UUID, version and flags, "manifest\0" and the Merkle offset.
const bmffBoxHead = 8 + 16 + 4 + 9 + 8

// bmffMaxWrap bounds the C2PA box, so that the 32-bit offsets checked
// against it when the file is read stay valid once it is inserted.
const bmffMaxWrap = 1 << 20

// bmffMaxBoxes bounds the boxes walked in one file.
const bmffMaxBoxes = 1 << 20

// bmffTopBox is a top-level box of the signed file.
type bmffTopBox struct {
	off, size int64
	excluded  bool
}

// bmffBox is a box of the stored file: its offset, whole size, header
// length and type.
type bmffBox struct {
	off, size, hdr int64
	typ            string
	toEnd          bool // its size field is 0: it runs to the end of the file
}

func (b bmffBox) end() int64 { return b.off + b.size }

// bmffPatch is a box of the stored file rewritten in the signed one: its
// bytes, and fix, which rewrites the offsets they hold given the map
// from stored offsets to signed ones.
type bmffPatch struct {
	box bmffBox
	raw []byte
	fix func(b []byte, move func(int64) int64) error
}

// bmffWalker reads boxes and counts them.
type bmffWalker struct {
	r     io.ReaderAt
	count int
}

// boxes returns the boxes filling [from, to): a box of size 0 runs to
// the end (allowed where top says so: the file's last box).
func (w *bmffWalker) boxes(from, to int64, top bool) ([]bmffBox, error) {
	var out []bmffBox
	h := make([]byte, 16)
	for off := from; off < to; {
		if w.count++; w.count > bmffMaxBoxes {
			return nil, fmt.Errorf("%w: too many BMFF boxes", ErrMalformed)
		}
		if off+8 > to {
			return nil, fmt.Errorf("%w: BMFF box header at %d runs past its parent", ErrMalformed, off)
		}
		if _, err := w.r.ReadAt(h[:8], off); err != nil {
			return nil, fmt.Errorf("%w: BMFF box at %d: %v", ErrMalformed, off, err)
		}
		b := bmffBox{off: off, size: int64(binary.BigEndian.Uint32(h)), hdr: 8, typ: string(h[4:8])}
		switch b.size {
		case 0:
			if !top {
				return nil, fmt.Errorf("%w: BMFF box %q of size 0 inside another", ErrMalformed, b.typ)
			}
			b.size, b.toEnd = to-off, true
		case 1:
			if off+16 > to {
				return nil, fmt.Errorf("%w: BMFF box %q runs past its parent", ErrMalformed, b.typ)
			}
			if _, err := w.r.ReadAt(h[8:16], off+8); err != nil {
				return nil, fmt.Errorf("%w: BMFF box at %d: %v", ErrMalformed, off, err)
			}
			b.size, b.hdr = int64(binary.BigEndian.Uint64(h[8:16])), 16
		}
		if b.typ == "uuid" {
			b.hdr += 16
		}
		if b.size < b.hdr || b.size > to-off {
			return nil, fmt.Errorf("%w: BMFF box %q at %d runs past its parent", ErrMalformed, b.typ, off)
		}
		out = append(out, b)
		off += b.size
	}
	return out, nil
}

// children returns the boxes inside b, after skip bytes of its own (4 for
// a full box's version and flags).
func (w *bmffWalker) children(b bmffBox, skip int64) ([]bmffBox, error) {
	if b.hdr+skip > b.size {
		return nil, fmt.Errorf("%w: BMFF box %q is too short", ErrMalformed, b.typ)
	}
	return w.boxes(b.off+b.hdr+skip, b.end(), false)
}

// path returns the boxes reached from b down the types in p (each
// level's boxes of that type).
func (w *bmffWalker) path(b bmffBox, p ...string) ([]bmffBox, error) {
	level := []bmffBox{b}
	for _, typ := range p {
		var next []bmffBox
		for _, x := range level {
			kids, err := w.children(x, 0)
			if err != nil {
				return nil, err
			}
			for _, k := range kids {
				if k.typ == typ {
					next = append(next, k)
				}
			}
		}
		level = next
	}
	return level, nil
}

// isC2PABox reports whether b is a C2PA uuid box.
func (w *bmffWalker) isC2PABox(b bmffBox) bool {
	if b.typ != "uuid" {
		return false
	}
	u := make([]byte, 16)
	if _, err := w.r.ReadAt(u, b.off+b.hdr-16); err != nil {
		return false
	}
	return bytes.Equal(u, c2paBoxUUID)
}

// bmffLayout walks a BMFF file's top-level boxes (ftyp first) and the
// boxes that keep absolute offsets: the C2PA box goes right after ftyp,
// C2PA boxes already there are dropped, and the offsets are rewritten.
func bmffLayout(r io.ReaderAt, size int64) (layout, error) {
	w := &bmffWalker{r: r}
	top, err := w.boxes(0, size, true)
	if err != nil {
		return layout{}, err
	}
	if len(top) == 0 || top[0].typ != "ftyp" {
		return layout{}, fmt.Errorf("%w: BMFF file does not start with ftyp", ErrMalformed)
	}
	ftypEnd := top[0].end()
	var dropped []bmffBox
	var patches []bmffPatch
	add := func(b bmffBox, fix func([]byte, func(int64) int64) error) error {
		if b.size > 64<<20 {
			return fmt.Errorf("%w: BMFF box %q of %d bytes is too large to rewrite", ErrMalformed, b.typ, b.size)
		}
		raw := make([]byte, b.size)
		if _, err := r.ReadAt(raw, b.off); err != nil {
			return fmt.Errorf("%w: BMFF box %q: %v", ErrMalformed, b.typ, err)
		}
		patches = append(patches, bmffPatch{box: b, raw: raw, fix: fix})
		return nil
	}
	var kept []bmffBox
	for i, b := range top {
		if i > 0 && w.isC2PABox(b) {
			dropped = append(dropped, b)
			continue
		}
		kept = append(kept, b)
		var err error
		switch b.typ {
		case "moov":
			err = w.moovPatches(b, add)
		case "meta":
			err = w.metaPatches(b, add)
		case "moof":
			err = w.moofPatches(b, add)
		case "mfra":
			var boxes []bmffBox
			if boxes, err = w.path(b, "tfra"); err == nil {
				for _, x := range boxes {
					if err = add(x, fixTfra); err != nil {
						break
					}
				}
			}
		}
		if err != nil {
			return layout{}, err
		}
		// A last box of size 0 (to the end of the file) gets its size.
		if b.toEnd {
			if b.size > 1<<32-1 {
				return layout{}, fmt.Errorf("%w: BMFF last box of size 0 is too large to size", ErrMalformed)
			}
			patches = append(patches, bmffPatch{box: bmffBox{off: b.off, size: 4}, raw: make([]byte, 4), fix: func(p []byte, _ func(int64) int64) error {
				binary.BigEndian.PutUint32(p, uint32(b.size))
				return nil
			}})
		}
	}
	// Check every patch once against the largest shift, so that keep
	// (which cannot fail) applies them within range.
	maxMove := func(off int64) int64 { return off + bmffMaxWrap }
	for _, p := range patches {
		if err := p.fix(bytes.Clone(p.raw), maxMove); err != nil {
			return layout{}, err
		}
	}
	sort.Slice(patches, func(i, j int) bool { return patches[i].box.off < patches[j].box.off })
	// move maps a stored offset to the signed file's: past ftyp, bytes
	// shift by the C2PA box, less the dropped boxes before them.
	moveFor := func(wrapLen int64) func(int64) int64 {
		return func(off int64) int64 {
			if off < ftypEnd {
				return off
			}
			out := off + wrapLen
			for _, d := range dropped {
				if d.off < off {
					out -= min(d.size, off-d.off)
				}
			}
			return out
		}
	}
	keep := func(wrapLen int64) []span {
		move := moveFor(wrapLen)
		var out []span
		cur := int64(0)
		di, pi := 0, 0
		for di < len(dropped) || pi < len(patches) {
			if pi >= len(patches) || (di < len(dropped) && dropped[di].off < patches[pi].box.off) {
				d := dropped[di]
				out = append(out, span{off: cur, n: d.off - cur})
				cur = d.end()
				di++
				continue
			}
			p := patches[pi]
			b := bytes.Clone(p.raw)
			_ = p.fix(b, move) // checked in bmffLayout
			out = append(out, span{off: cur, n: p.box.off - cur}, span{off: p.box.off, n: p.box.size, lit: b})
			cur = p.box.end()
			pi++
		}
		out = append(out, span{off: cur, n: size - cur})
		return nonEmpty(out)
	}
	boxes := func(wrapLen int64) []bmffTopBox {
		move := moveFor(wrapLen)
		out := []bmffTopBox{{off: 0, size: top[0].size, excluded: true}, {off: ftypEnd, size: wrapLen, excluded: true}}
		for _, b := range kept[1:] {
			switch b.typ {
			case "ftyp", "mfra", "free", "skip":
				out = append(out, bmffTopBox{off: move(b.off), size: b.size, excluded: true})
			default:
				out = append(out, bmffTopBox{off: move(b.off), size: b.size})
			}
		}
		return out
	}
	return layout{keep: keep, insertAt: ftypEnd, wrap: bmffC2PABox, bmff: boxes}, nil
}

// bmffC2PABox wraps a manifest store in the C2PA box.
func bmffC2PABox(store []byte) []byte {
	out := make([]byte, 8, bmffBoxHead+len(store))
	binary.BigEndian.PutUint32(out, uint32(bmffBoxHead+len(store)))
	copy(out[4:], "uuid")
	out = append(out, c2paBoxUUID...)
	out = append(out, 0, 0, 0, 0)
	out = append(out, "manifest\x00"...)
	out = append(out, 0, 0, 0, 0, 0, 0, 0, 0)
	return append(out, store...)
}

// moovPatches adds the sample tables' chunk and auxiliary information
// offsets of every track.
func (w *bmffWalker) moovPatches(moov bmffBox, add func(bmffBox, func([]byte, func(int64) int64) error) error) error {
	stbls, err := w.path(moov, "trak", "mdia", "minf", "stbl")
	if err != nil {
		return err
	}
	for _, stbl := range stbls {
		kids, err := w.children(stbl, 0)
		if err != nil {
			return err
		}
		for _, k := range kids {
			var fix func([]byte, func(int64) int64) error
			switch k.typ {
			case "stco":
				fix = fixChunkOffsets(4)
			case "co64":
				fix = fixChunkOffsets(8)
			case "saio":
				fix = fixSaio
			default:
				continue
			}
			if err := add(k, fix); err != nil {
				return err
			}
		}
	}
	return nil
}

// metaPatches adds the item locations of a top-level meta box.
func (w *bmffWalker) metaPatches(meta bmffBox, add func(bmffBox, func([]byte, func(int64) int64) error) error) error {
	kids, err := w.children(meta, 4)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if k.typ == "iloc" {
			if err := add(k, fixIloc); err != nil {
				return err
			}
		}
	}
	return nil
}

// moofPatches adds the track fragment headers of a movie fragment (their
// base data offset, when explicit, is absolute).
func (w *bmffWalker) moofPatches(moof bmffBox, add func(bmffBox, func([]byte, func(int64) int64) error) error) error {
	tfhds, err := w.path(moof, "traf", "tfhd")
	if err != nil {
		return err
	}
	for _, t := range tfhds {
		if err := add(t, fixTfhd); err != nil {
			return err
		}
	}
	return nil
}

// boxReader reads the fields of a box's bytes, failing past the end.
type boxReader struct {
	b   []byte
	at  int
	err error
}

func (r *boxReader) need(n int) bool {
	if r.err == nil && r.at+n > len(r.b) {
		r.err = fmt.Errorf("%w: BMFF box %q is truncated", ErrMalformed, r.b[4:8])
	}
	return r.err == nil
}

// uint reads an n-byte big-endian field (n 0, 1, 2, 4 or 8) and returns
// its value and where it is.
func (r *boxReader) uint(n int) (uint64, int) {
	at := r.at
	if n == 0 || !r.need(n) {
		return 0, at
	}
	var v uint64
	for _, c := range r.b[r.at : r.at+n] {
		v = v<<8 | uint64(c)
	}
	r.at += n
	return v, at
}

// put writes v as an n-byte field at at, failing when it does not fit.
func (r *boxReader) put(at, n int, v int64) {
	if r.err != nil {
		return
	}
	if v < 0 || (n < 8 && v >= 1<<(8*n)) {
		r.err = fmt.Errorf("%w: BMFF offset %d does not fit %d bytes once the manifest is inserted", ErrMalformed, v, n)
		return
	}
	for i := n - 1; i >= 0; i-- {
		r.b[at+i] = byte(v)
		v >>= 8
	}
}

// fullBox returns a reader after a full box's header, version and flags.
func fullBox(b []byte) (*boxReader, byte, uint32) {
	hdr := 8
	if binary.BigEndian.Uint32(b) == 1 {
		hdr = 16
	}
	r := &boxReader{b: b, at: hdr}
	vf, _ := r.uint(4)
	return r, byte(vf >> 24), uint32(vf) & 0xffffff
}

// fixChunkOffsets rewrites an stco (n 4) or co64 (n 8) box's entries.
func fixChunkOffsets(n int) func([]byte, func(int64) int64) error {
	return func(b []byte, move func(int64) int64) error {
		r, _, _ := fullBox(b)
		return moveOffsets(r, n, "chunk offset", move)
	}
}

// moveOffsets rewrites the table of offsets at r, a count then n-byte
// entries; what names the table in errors.
func moveOffsets(r *boxReader, n int, what string, move func(int64) int64) error {
	count, _ := r.uint(4)
	if r.err == nil && uint64(len(r.b)-r.at) < count*uint64(n) {
		return fmt.Errorf("%w: BMFF %s table is truncated", ErrMalformed, what)
	}
	for range count {
		v, at := r.uint(n)
		r.put(at, n, move(int64(v)))
	}
	return r.err
}

// fixSaio rewrites a sample table's auxiliary information offsets.
func fixSaio(b []byte, move func(int64) int64) error {
	r, version, flags := fullBox(b)
	if flags&1 != 0 {
		r.uint(4)
		r.uint(4)
	}
	n := 4
	if version != 0 {
		n = 8
	}
	return moveOffsets(r, n, "saio", move)
}

// fixTfhd rewrites a track fragment header's explicit base data offset.
func fixTfhd(b []byte, move func(int64) int64) error {
	r, _, flags := fullBox(b)
	r.uint(4) // track_ID
	if flags&1 != 0 {
		v, at := r.uint(8)
		r.put(at, 8, move(int64(v)))
	}
	return r.err
}

// fixTfra rewrites the movie fragment offsets of a track fragment random
// access box.
func fixTfra(b []byte, move func(int64) int64) error {
	r, version, _ := fullBox(b)
	r.uint(4) // track_ID
	sizes, _ := r.uint(4)
	count, _ := r.uint(4)
	n := 4
	if version == 1 {
		n = 8
	}
	rest := int((sizes>>4)&3+1) + int((sizes>>2)&3+1) + int(sizes&3+1)
	if r.err == nil && uint64(len(b)-r.at) < count*uint64(2*n+rest) {
		return fmt.Errorf("%w: BMFF tfra table is truncated", ErrMalformed)
	}
	for range count {
		r.uint(n) // time
		v, at := r.uint(n)
		r.put(at, n, move(int64(v)))
		r.at += rest
	}
	return r.err
}

// fixIloc rewrites the file offsets of an item location box: for each
// item stored in this file (construction method 0, data reference 0),
// its base offset when it has one, otherwise each extent's offset.
func fixIloc(b []byte, move func(int64) int64) error {
	r, version, _ := fullBox(b)
	if version > 2 {
		return fmt.Errorf("%w: iloc version %d", ErrMalformed, version)
	}
	sizes, _ := r.uint(2)
	offSize, lenSize, baseSize, idxSize := int(sizes>>12&15), int(sizes>>8&15), int(sizes>>4&15), int(sizes&15)
	for _, s := range []int{offSize, lenSize, baseSize} {
		if s != 0 && s != 4 && s != 8 {
			return fmt.Errorf("%w: iloc field size %d", ErrMalformed, s)
		}
	}
	if version == 0 {
		idxSize = 0
	} else if idxSize != 0 && idxSize != 4 && idxSize != 8 {
		return fmt.Errorf("%w: iloc index size %d", ErrMalformed, idxSize)
	}
	idBytes := 2
	if version == 2 {
		idBytes = 4
	}
	items, _ := r.uint(idBytes)
	for i := uint64(0); i < items && r.err == nil; i++ {
		r.uint(idBytes) // item_ID
		method := uint64(0)
		if version > 0 {
			m, _ := r.uint(2)
			method = m & 15
		}
		dref, _ := r.uint(2)
		base, baseAt := r.uint(baseSize)
		inFile := method == 0 && dref == 0
		if inFile && baseSize > 0 && base != 0 {
			r.put(baseAt, baseSize, move(int64(base)))
		}
		extents, _ := r.uint(2)
		for range extents {
			r.uint(idxSize)
			off, offAt := r.uint(offSize)
			if inFile && (baseSize == 0 || base == 0) && offSize > 0 {
				r.put(offAt, offSize, move(int64(off)))
			}
			r.uint(lenSize)
			if r.err != nil {
				break
			}
		}
	}
	return r.err
}
