package c2pa

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"threadbox/infra/c2pa/c2patest"
)

// bmffChild finds the first box of type typ among the boxes of b[from:to].
func bmffChild(t *testing.T, b []byte, from, to int, typ string) (int, int) {
	t.Helper()
	for off := from; off+8 <= to; {
		n := int(binary.BigEndian.Uint32(b[off:]))
		if n == 0 {
			n = to - off
		}
		if string(b[off+4:off+8]) == typ {
			return off, off + n
		}
		if n < 8 {
			break
		}
		off += n
	}
	t.Fatalf("no %s box", typ)
	return 0, 0
}

// bmffFind follows a path of box types from the top of b.
func bmffFind(t *testing.T, b []byte, path ...string) (int, int) {
	t.Helper()
	from, to := 0, len(b)
	for i, typ := range path {
		s, e := bmffChild(t, b, from, to, typ)
		from, to = s+8, e
		if i < len(path)-1 && typ == "meta" {
			from += 4
		}
	}
	return from - 8, to
}

// chunkOffsets reads a movie's chunk offset table.
func chunkOffsets(t *testing.T, b []byte, co64 bool) []int {
	t.Helper()
	typ := "stco"
	if co64 {
		typ = "co64"
	}
	s, _ := bmffFind(t, b, "moov", "trak", "mdia", "minf", "stbl", typ)
	n := int(binary.BigEndian.Uint32(b[s+12:]))
	var out []int
	for i := range n {
		if co64 {
			out = append(out, int(binary.BigEndian.Uint64(b[s+16+8*i:])))
		} else {
			out = append(out, int(binary.BigEndian.Uint32(b[s+16+4*i:])))
		}
	}
	return out
}

var bmffCases = []struct {
	name, mime string
	format     Format
	b          func() []byte
}{
	{"mp4 moov first", "video/mp4", MP4, func() []byte { return c2patest.MP4(c2patest.MP4Options{Brand: "isom"}) }},
	{"mp4 moov last co64", "video/mp4", MP4, func() []byte { return c2patest.MP4(c2patest.MP4Options{Brand: "isom", CO64: true, MoovLast: true}) }},
	{"mp4 mdat to the end", "video/mp4", MP4, func() []byte { return c2patest.MP4(c2patest.MP4Options{Brand: "mp42", MdatToEnd: true}) }},
	{"mp4 fragmented", "video/mp4", MP4, func() []byte { return c2patest.MP4(c2patest.MP4Options{Brand: "iso6", Fragmented: true}) }},
	{"mov", "video/quicktime", MOV, func() []byte { return c2patest.MP4(c2patest.MP4Options{Brand: "qt", MoovLast: true}) }},
	{"m4a", "audio/mp4", M4A, func() []byte { return c2patest.MP4(c2patest.MP4Options{Brand: "M4A"}) }},
	{"heic iloc v0", "image/heic", HEIC, func() []byte { return c2patest.HEIF(c2patest.HEIFOptions{Brand: "heic"}) }},
	{"heic iloc v1", "image/heic", HEIC, func() []byte { return c2patest.HEIF(c2patest.HEIFOptions{Brand: "heic", ILocVersion: 1}) }},
	{"avif iloc v2", "image/avif", AVIF, func() []byte { return c2patest.HEIF(c2patest.HEIFOptions{Brand: "avif", ILocVersion: 2}) }},
}

// Every BMFF format validates (signature, BMFF hash, the threadbox
// assertion), the C2PA box follows ftyp, and every offset the file keeps
// still points at the same bytes.
func TestBMFFValidates(t *testing.T) {
	s := testSigner(t)
	for _, tc := range bmffCases {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.b()
			signed := signBytes(t, s, orig, tc.format, Provenance{Org: "org_1", Thread: "thr_1"})
			ftypEnd := int(binary.BigEndian.Uint32(orig))
			if string(signed[ftypEnd+4:ftypEnd+8]) != "uuid" || !bytes.Equal(signed[ftypEnd+8:ftypEnd+24], c2paBoxUUID) {
				t.Fatalf("no C2PA box after ftyp")
			}
			r := validate(t, tc.mime, signed)
			if r.Error != "" || r.ActiveManifest == "" {
				t.Fatalf("no manifest read: %s", r.Raw)
			}
			if f := r.Failures(); len(f) > 0 {
				t.Fatalf("validation failures %+v\n%s", f, r.Raw)
			}
			for _, code := range []string{"claimSignature.validated", "assertion.bmffHash.match", "assertion.hashedURI.match"} {
				if !r.Has(code) {
					t.Errorf("no %s among the successes\n%s", code, r.Raw)
				}
			}
			if r.Assertion(labelThreadbox) == nil {
				t.Errorf("no threadbox assertion\n%s", r.Raw)
			}
			checkOffsets(t, tc.format, orig, signed)
		})
	}
}

// checkOffsets checks that the offsets a signed file keeps point at the
// bytes the stored file's pointed at.
func checkOffsets(t *testing.T, f Format, orig, signed []byte) {
	t.Helper()
	switch f {
	case HEIC, AVIF:
		for _, item := range []int{1, 2} {
			want := c2patest.ChunkData(item)
			if bytes.Count(signed, want) != 1 {
				t.Fatalf("item %d's data is not in the signed file once", item)
			}
		}
		s, _ := bmffFind(t, signed, "meta", "iloc")
		so, _ := bmffFind(t, orig, "meta", "iloc")
		version := signed[s+8]
		// item 1's extent offset and item 2's base offset, by position
		idLen := 2
		if version == 2 {
			idLen = 4
		}
		cm := 0
		if version > 0 {
			cm = 2
		}
		at := s + 12 + 2 + idLen           // first item
		at1 := at + idLen + cm + 2 + 4 + 2 // its extent offset
		at2 := at1 + 8 + idLen + cm + 2    // item 2's base offset
		_ = so
		off1 := int(binary.BigEndian.Uint32(signed[at1:]))
		off2 := int(binary.BigEndian.Uint32(signed[at2:]))
		if !bytes.HasPrefix(signed[off1:], c2patest.ChunkData(1)) || !bytes.HasPrefix(signed[off2:], c2patest.ChunkData(2)) {
			t.Errorf("iloc offsets %d, %d do not point at the items' data", off1, off2)
		}
	default:
		co64 := bytes.Contains(orig, []byte("co64"))
		was, now := chunkOffsets(t, orig, co64), chunkOffsets(t, signed, co64)
		for i := range was {
			if !bytes.Equal(orig[was[i]:was[i]+len(c2patest.ChunkData(i))], signed[now[i]:now[i]+len(c2patest.ChunkData(i))]) {
				t.Errorf("chunk %d: offset %d no longer points at its data (was %d)", i, now[i], was[i])
			}
		}
		if bytes.Contains(orig, []byte("tfhd")) {
			s, _ := bmffFind(t, signed, "moof", "traf", "tfhd")
			base := int(binary.BigEndian.Uint64(signed[s+16:]))
			if !bytes.HasPrefix(signed[base:], c2patest.ChunkData(6)) {
				t.Errorf("tfhd base data offset %d does not point at the fragment's data", base)
			}
			m, _ := bmffFind(t, signed, "mfra", "tfra")
			moof := int(binary.BigEndian.Uint64(signed[m+8+4+12+8:]))
			if string(signed[moof+4:moof+8]) != "moof" {
				t.Errorf("tfra moof offset %d does not point at moof", moof)
			}
		}
	}
}

// A byte flipped in the media data, or in the movie box, after signing is
// a BMFF hash mismatch.
func TestTamperedBMFFFails(t *testing.T) {
	s := testSigner(t)
	for _, tc := range bmffCases[:2] {
		signed := signBytes(t, s, tc.b(), tc.format, Provenance{Org: "org_1"})
		for _, where := range []string{"mdat", "mvhd"} {
			t.Run(tc.name+" "+where, func(t *testing.T) {
				flipped := bytes.Clone(signed)
				flipped[bytes.Index(flipped, []byte(where))+20] ^= 0x01
				if r := validate(t, tc.mime, flipped); !r.Has("assertion.bmffHash.mismatch") {
					t.Fatalf("a flipped byte in %s is not a hash mismatch:\n%s", where, r.Raw)
				}
			})
		}
	}
}

// A signed file signed again carries one manifest, of the same size, and
// its offsets still point at its data.
func TestBMFFResigning(t *testing.T) {
	s := testSigner(t)
	for _, tc := range []int{1, 7} {
		c := bmffCases[tc]
		t.Run(c.name, func(t *testing.T) {
			orig := c.b()
			once := signBytes(t, s, orig, c.format, Provenance{Org: "org_1"})
			twice := signBytes(t, s, once, c.format, Provenance{Org: "org_2"})
			if len(twice) != len(once) {
				t.Errorf("re-signed size %d, want %d", len(twice), len(once))
			}
			r := validate(t, c.mime, twice)
			if f := r.Failures(); len(f) > 0 || len(r.Manifests) != 1 {
				t.Fatalf("%d manifests, failures %+v\n%s", len(r.Manifests), f, r.Raw)
			}
			checkOffsets(t, c.format, orig, twice)
		})
	}
}

func TestBMFFRefusals(t *testing.T) {
	s := testSigner(t)
	mp4 := c2patest.MP4(c2patest.MP4Options{Brand: "isom"})
	noFtyp := bytes.Clone(mp4)
	copy(noFtyp[4:], "free")
	overrun := bytes.Clone(mp4)
	binary.BigEndian.PutUint32(overrun[len(overrun)-len(c2patest.ChunkData(0))*6-8:], 1<<30)
	badIloc := c2patest.HEIF(c2patest.HEIFOptions{Brand: "heic", ILocVersion: 1})
	i := bytes.Index(badIloc, []byte("iloc"))
	badIloc[i+8] = 0x33 // offset size 3
	far := c2patest.MP4(c2patest.MP4Options{Brand: "isom"})
	so := bytes.Index(far, []byte("stco"))
	binary.BigEndian.PutUint32(far[so+12:], 0xffffff00) // an offset near 4 GiB
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"no ftyp", noFtyp},
		{"box past the end", overrun},
		{"bad iloc field size", badIloc},
		{"offset overflows 32 bits", far},
		{"truncated", mp4[:30]},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Sign(context.Background(), bytes.NewReader(tc.b), int64(len(tc.b)), MP4, Provenance{}); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}
