package c2patest

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The files below are BMFF media built box by box, for tests of signing
// formats no tool in the sandbox image writes (MP4, MOV, M4A, HEIC,
// AVIF): their offsets (chunk offsets, item locations, fragment offsets)
// point at ChunkData, so a test can check they still do once a manifest
// moves the data.

// box is an ISO BMFF box: a 32-bit size, a type and its payload.
func box(typ string, payload ...[]byte) []byte {
	n := 8
	for _, p := range payload {
		n += len(p)
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, n), uint32(n))
	out = append(out, typ...)
	for _, p := range payload {
		out = append(out, p...)
	}
	return out
}

// fullBox is a full box: version, flags, then the payload.
func fullBox(typ string, version byte, flags uint32, payload ...[]byte) []byte {
	vf := binary.BigEndian.AppendUint32(nil, uint32(version)<<24|flags)
	return box(typ, append([][]byte{vf}, payload...)...)
}

func u32s(v ...uint32) []byte {
	var out []byte
	for _, x := range v {
		out = binary.BigEndian.AppendUint32(out, x)
	}
	return out
}

func u64s(v ...uint64) []byte {
	var out []byte
	for _, x := range v {
		out = binary.BigEndian.AppendUint64(out, x)
	}
	return out
}

// ChunkData is the content of chunk i of a test file, distinct for each.
func ChunkData(i int) []byte {
	return []byte(fmt.Sprintf("chunk-%03d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, 40)))
}

// MP4Options shape a test movie.
type MP4Options struct {
	Brand      string // the major brand: isom, qt, M4A
	CO64       bool   // 64-bit chunk offsets
	MoovLast   bool   // mdat before moov, as a recorder writes it
	MdatToEnd  bool   // the last box's size field is 0
	Fragmented bool   // a movie fragment (moof with an explicit base offset) and mfra
}

// MP4 is a movie of one track of chunks ChunkData(0..n-1) in mdat,
// its sample table pointing at each.
func MP4(o MP4Options) []byte {
	const n = 6
	ftyp := box("ftyp", []byte(o.Brand+"    "[:4-len(o.Brand)]), u32s(0x200), []byte("isommp41"))
	var mdatBody []byte
	var rel []int // each chunk's offset in mdat's payload
	for i := range n {
		rel = append(rel, len(mdatBody))
		mdatBody = append(mdatBody, ChunkData(i)...)
	}
	moov := func(mdatPayload int64) []byte {
		var offsets []byte
		var sizes []byte
		for i := range n {
			if o.CO64 {
				offsets = append(offsets, u64s(uint64(mdatPayload)+uint64(rel[i]))...)
			} else {
				offsets = append(offsets, u32s(uint32(mdatPayload)+uint32(rel[i]))...)
			}
			sizes = append(sizes, u32s(uint32(len(ChunkData(i))))...)
		}
		co := fullBox("stco", 0, 0, u32s(n), offsets)
		if o.CO64 {
			co = fullBox("co64", 0, 0, u32s(n), offsets)
		}
		stbl := box("stbl",
			fullBox("stsd", 0, 0, u32s(0)),
			fullBox("stts", 0, 0, u32s(1, n, 1000)),
			fullBox("stsc", 0, 0, u32s(1, 1, 1, 1)),
			fullBox("stsz", 0, 0, u32s(0, n), sizes),
			co,
			fullBox("saio", 0, 0, u32s(1, uint32(mdatPayload))),
		)
		minf := box("minf", fullBox("smhd", 0, 0, u32s(0)), box("dinf", fullBox("dref", 0, 0, u32s(1), fullBox("url ", 0, 1))), stbl)
		mdia := box("mdia", fullBox("mdhd", 0, 0, u32s(0, 0, 1000, n*1000), []byte{0x55, 0xc4, 0, 0}),
			fullBox("hdlr", 0, 0, u32s(0), []byte("soun"), u32s(0, 0, 0), []byte("sound\x00")), minf)
		trak := box("trak", fullBox("tkhd", 0, 3, make([]byte, 80)), mdia)
		return box("moov", fullBox("mvhd", 0, 0, make([]byte, 96)), trak)
	}
	mdatHdr := u32s(uint32(8+len(mdatBody)), 0)
	copy(mdatHdr[4:], "mdat")
	if o.MdatToEnd {
		binary.BigEndian.PutUint32(mdatHdr, 0)
	}
	mdat := append(mdatHdr, mdatBody...)
	free := box("free", make([]byte, 16))
	var out []byte
	if o.MoovLast {
		out = append(append(append(ftyp, free...), mdat...), moov(int64(len(ftyp)+len(free)+8))...)
	} else {
		m := moov(0)
		m = moov(int64(len(ftyp) + len(m) + len(free) + 8))
		out = append(append(append(ftyp, m...), free...), mdat...)
	}
	if o.Fragmented {
		// A fragment whose tfhd has an explicit base data offset: the
		// start of its own mdat's payload.
		moofLen := 8 + 8 + 8 + 16
		base := uint64(len(out) + moofLen + 8)
		moof := box("moof", box("traf", fullBox("tfhd", 0, 1, u32s(1), u64s(base))))
		out = append(out, moof...)
		out = append(out, box("mdat", ChunkData(n))...)
		out = append(out, box("mfra", fullBox("tfra", 1, 0, u32s(1, 0, 1), u64s(0, uint64(len(out)-len(moof)-8-len(ChunkData(n)))), []byte{1, 1, 1}))...)
	}
	return out
}

// HEIFOptions shape a test still image.
type HEIFOptions struct {
	Brand       string // heic or avif
	ILocVersion byte
}

// HEIF is an image file of three items: one in mdat by an extent's
// absolute offset, one in mdat by a base offset and a relative extent,
// and one in the meta box's idat (construction method 1, version 1 and 2
// only).
func HEIF(o HEIFOptions) []byte {
	ftyp := box("ftyp", []byte(o.Brand), u32s(0), []byte("mif1"+o.Brand))
	item1, item2, item3 := ChunkData(1), ChunkData(2), ChunkData(3)
	meta := func(mdatPayload uint32) []byte {
		// offset_size 4, length_size 4, base_offset_size 4, index_size 0
		var iloc []byte
		iloc = append(iloc, 0x44, 0x40)
		id := func(v int) []byte {
			if o.ILocVersion == 2 {
				return u32s(uint32(v))
			}
			return binary.BigEndian.AppendUint16(nil, uint16(v))
		}
		cm := func(m uint16) []byte {
			if o.ILocVersion == 0 {
				return nil
			}
			return binary.BigEndian.AppendUint16(nil, m)
		}
		items := 2
		if o.ILocVersion > 0 {
			items = 3
		}
		iloc = append(iloc, id(items)...)
		// item 1: base 0, extent at the absolute offset
		iloc = append(iloc, id(1)...)
		iloc = append(iloc, cm(0)...)
		iloc = append(iloc, 0, 0)
		iloc = append(iloc, u32s(0)...)
		iloc = append(iloc, 0, 1)
		iloc = append(iloc, u32s(mdatPayload, uint32(len(item1)))...)
		// item 2: base at its data, extent offset 0
		iloc = append(iloc, id(2)...)
		iloc = append(iloc, cm(0)...)
		iloc = append(iloc, 0, 0)
		iloc = append(iloc, u32s(mdatPayload+uint32(len(item1)))...)
		iloc = append(iloc, 0, 1)
		iloc = append(iloc, u32s(0, uint32(len(item2)))...)
		if o.ILocVersion > 0 {
			// item 3: in idat
			iloc = append(iloc, id(3)...)
			iloc = append(iloc, cm(1)...)
			iloc = append(iloc, 0, 0)
			iloc = append(iloc, u32s(0)...)
			iloc = append(iloc, 0, 1)
			iloc = append(iloc, u32s(0, uint32(len(item3)))...)
		}
		codec := "hvc1"
		if o.Brand == "avif" {
			codec = "av01"
		}
		infe := func(id uint16) []byte {
			return fullBox("infe", 2, 0, binary.BigEndian.AppendUint16(nil, id), []byte{0, 0}, []byte(codec), []byte("\x00"))
		}
		return fullBox("meta", 0, 0,
			fullBox("hdlr", 0, 0, u32s(0), []byte("pict"), u32s(0, 0, 0), []byte("\x00")),
			fullBox("pitm", 0, 0, []byte{0, 1}),
			fullBox("iloc", o.ILocVersion, 0, iloc),
			fullBox("iinf", 0, 0, []byte{0, 3}, infe(1), infe(2), infe(3)),
			box("idat", item3),
		)
	}
	m := meta(0)
	m = meta(uint32(len(ftyp) + len(m) + 8))
	return append(append(ftyp, m...), box("mdat", item1, item2)...)
}
