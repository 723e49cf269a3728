package c2pa

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

// A TIFF carries its manifest store as the value of tag 52545 (0xCD41,
// type UNDEFINED) of its first image file directory (IFD0). The signed
// file is the stored one with its header pointing at a copy of IFD0 that
// has the tag, appended at the end and followed by the store: no byte of
// the image moves, so no offset in the file changes. The data hash leaves
// out the store alone.
const (
	tiffC2PATag   = 0xcd41
	tiffUndefined = 7
	// tiffMaxIFDs bounds the walk of the IFD chain.
	tiffMaxIFDs = 2000
)

// tiffLayout reads a classic TIFF's header and IFD chain. An IFD0 C2PA
// entry already there is left out of the copy; when its store is the
// file's tail (a file this signer signed), that tail and the IFD0 copy
// just before it are dropped, so re-signing does not grow the file. A
// BigTIFF, or a C2PA entry in an IFD other than IFD0, is not signed.
func tiffLayout(r io.ReaderAt, size int64) (layout, error) {
	head := make([]byte, 8)
	if _, err := r.ReadAt(head, 0); err != nil {
		return layout{}, fmt.Errorf("%w: not a TIFF", ErrMalformed)
	}
	var bo interface {
		binary.ByteOrder
		binary.AppendByteOrder
	}
	switch string(head[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return layout{}, fmt.Errorf("%w: not a TIFF", ErrMalformed)
	}
	switch bo.Uint16(head[2:]) {
	case 42:
	case 43:
		return layout{}, fmt.Errorf("%w: BigTIFF is not signed", ErrMalformed)
	default:
		return layout{}, fmt.Errorf("%w: not a TIFF", ErrMalformed)
	}
	ifd0 := int64(bo.Uint32(head[4:]))
	entries, next0, err := tiffIFD(r, size, bo, ifd0)
	if err != nil {
		return layout{}, err
	}
	next := next0
	// IFD0's entries but a C2PA one, and where an old store lies.
	var kept [][]byte
	oldStore, oldLen := int64(-1), int64(0)
	for _, e := range entries {
		if bo.Uint16(e) == tiffC2PATag {
			oldStore, oldLen = int64(bo.Uint32(e[8:])), int64(bo.Uint32(e[4:]))
			continue
		}
		kept = append(kept, e)
	}
	seen := map[int64]bool{ifd0: true}
	for n := 1; next != 0; n++ {
		if seen[next] || n > tiffMaxIFDs {
			return layout{}, fmt.Errorf("%w: TIFF IFD chain loops or is too long", ErrMalformed)
		}
		seen[next] = true
		es, nx, err := tiffIFD(r, size, bo, next)
		if err != nil {
			return layout{}, err
		}
		for _, e := range es {
			if bo.Uint16(e) == tiffC2PATag {
				return layout{}, fmt.Errorf("%w: TIFF with a C2PA entry outside IFD0", ErrMalformed)
			}
		}
		next = nx
	}
	// The stored bytes kept: all of them, or up to a tail this signer
	// appended (the IFD0 copy, then the old store at the very end).
	end := size
	if oldStore >= 8 && oldLen > 0 && oldStore+oldLen == size {
		end = oldStore
		ifdLen := int64(2 + 12*len(entries) + 4)
		if ifd0+ifdLen == end {
			end = ifd0
		}
	}
	pad := end & 1
	ifdAt := end + pad
	n := len(kept) + 1
	ifdLen := int64(2 + 12*n + 4)
	storeAt := ifdAt + ifdLen
	keep := func(wrapLen int64) []span {
		hdr := append([]byte{}, head...)
		bo.PutUint32(hdr[4:], uint32(ifdAt))
		c2pa := make([]byte, 12)
		bo.PutUint16(c2pa, tiffC2PATag)
		bo.PutUint16(c2pa[2:], tiffUndefined)
		bo.PutUint32(c2pa[4:], uint32(wrapLen))
		bo.PutUint32(c2pa[8:], uint32(storeAt))
		all := append(append([][]byte{}, kept...), c2pa)
		sort.SliceStable(all, func(i, j int) bool { return bo.Uint16(all[i]) < bo.Uint16(all[j]) })
		ifd := make([]byte, pad, pad+ifdLen)
		ifd = bo.AppendUint16(ifd, uint16(n))
		for _, e := range all {
			ifd = append(ifd, e...)
		}
		ifd = bo.AppendUint32(ifd, uint32(next0))
		return nonEmpty([]span{
			{off: 0, n: 8, lit: hdr},
			{off: 8, n: end - 8},
			{off: end, lit: ifd},
		})
	}
	if storeAt > 1<<32-1<<20 {
		return layout{}, fmt.Errorf("%w: TIFF too large for 32-bit offsets", ErrMalformed)
	}
	return layout{keep: keep, insertAt: storeAt, wrap: func(store []byte) []byte { return store }}, nil
}

// tiffIFD reads the IFD at off: its 12-byte entries and the offset of the
// next IFD.
func tiffIFD(r io.ReaderAt, size int64, bo binary.ByteOrder, off int64) ([][]byte, int64, error) {
	if off < 8 || off+2 > size {
		return nil, 0, fmt.Errorf("%w: TIFF IFD at %d is outside the file", ErrMalformed, off)
	}
	c := make([]byte, 2)
	if _, err := r.ReadAt(c, off); err != nil {
		return nil, 0, fmt.Errorf("%w: TIFF IFD: %v", ErrMalformed, err)
	}
	n := int64(bo.Uint16(c))
	if n == 0 || off+2+12*n+4 > size {
		return nil, 0, fmt.Errorf("%w: TIFF IFD at %d runs past the end", ErrMalformed, off)
	}
	b := make([]byte, 12*n+4)
	if _, err := r.ReadAt(b, off+2); err != nil {
		return nil, 0, fmt.Errorf("%w: TIFF IFD: %v", ErrMalformed, err)
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[12*i : 12*i+12]
	}
	return out, int64(bo.Uint32(b[12*n:])), nil
}
