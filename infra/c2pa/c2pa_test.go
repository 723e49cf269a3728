package c2pa

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/infra/c2pa/c2patest"
)

func validate(t *testing.T, mime string, b []byte) c2patest.Report {
	t.Helper()
	return c2patest.Validate(t, mime, b)
}

func testImage() image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := range 48 {
		for x := range 64 {
			img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 5), 128, 255})
		}
	}
	return img
}

func encodeImage(t *testing.T, f Format) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch f {
	case PNG:
		err = png.Encode(&b, testImage())
	case JPEG:
		err = jpeg.Encode(&b, testImage(), nil)
	case GIF:
		err = gif.Encode(&b, testImage(), nil)
	case WAV:
		return testWAV()
	case SVG:
		return []byte(testSVG)
	case WEBP:
		return readTestdata(t, "lossy.webp")
	case MP3:
		return testMP3(nil)
	case TIFF:
		return testTIFF(binary.LittleEndian, 2)
	case FLAC:
		return testFLAC()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// testWAV is a second of 8 kHz 16-bit mono PCM: a sawtooth.
func testWAV() []byte {
	const n = 8000
	var b bytes.Buffer
	le := binary.LittleEndian
	b.WriteString("RIFF")
	binary.Write(&b, le, uint32(36+2*n))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(8000), uint32(16000), uint16(2), uint16(16)} {
		binary.Write(&b, le, v)
	}
	b.WriteString("data")
	binary.Write(&b, le, uint32(2*n))
	for i := range n {
		binary.Write(&b, le, int16((i%200)*300-30000))
	}
	return b.Bytes()
}

// testSVG is an SVG as plotting libraries write it: a prolog, a doctype
// and a metadata element of its own.
const testSVG = `<?xml version="1.0" encoding="utf-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<!-- made by a test -->
<svg xmlns="http://www.w3.org/2000/svg" width="64" height="48" viewBox="0 0 64 48" data-note="a > in a value">
 <metadata><title>plot</title></metadata>
 <path d="M10 10 L50 40" stroke="#c82858"/>
</svg>
`

// media are the formats signed, with where in a signed file a byte of the
// content (not the manifest) is.
type mediaCase struct {
	format Format
	mime   string
	flipAt func(signed []byte) int
}

var media = []mediaCase{
	{PNG, "image/png", func(b []byte) int { return len(b) - 20 }},
	{JPEG, "image/jpeg", func(b []byte) int { return len(b) - 20 }},
	{GIF, "image/gif", func(b []byte) int { return len(b) - 20 }},
	{WAV, "audio/wav", func(b []byte) int { return 100 }},
	{SVG, "image/svg+xml", func(b []byte) int { return bytes.LastIndex(b, []byte("L50")) + 1 }},
	{WEBP, "image/webp", func(b []byte) int { return 60 }},
	{MP3, "audio/mpeg", func(b []byte) int { return len(b) - 100 }},
	{TIFF, "image/tiff", func(b []byte) int { return 200 }},
	{FLAC, "audio/flac", func(b []byte) int { return len(b) - 10 }},
}

// resignable are the formats whose manifest a re-signing replaces (an SVG
// that carries one is served as written).
var resignable = append(append([]mediaCase{}, media[:4]...), media[5:]...)

func testSigner(t *testing.T) *Signer {
	t.Helper()
	key, chain, created, err := SelfSignedIssuer(t.TempDir(), "threadbox test")
	if err != nil || !created {
		t.Fatalf("issuer: %v (created %v)", err, created)
	}
	s, err := NewSigner(key, chain, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func signBytes(t *testing.T, s *Signer, b []byte, f Format, p Provenance) []byte {
	t.Helper()
	a, err := s.Sign(context.Background(), bytes.NewReader(b), int64(len(b)), f, p)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	out, err := io.ReadAll(a.Reader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(out)) != a.Size {
		t.Fatalf("asset size %d, read %d", a.Size, len(out))
	}
	return out
}

func failures(r c2patest.Report) []c2patest.Status { return r.Failures() }

func TestSignedMediaValidates(t *testing.T) {
	s := testSigner(t)
	prov := Provenance{Org: "org_1", Thread: "thr_1", ToolUseID: "toolu_1", Path: "/mnt/user-data/outputs/plot"}
	for _, tc := range media {
		t.Run(string(tc.format), func(t *testing.T) {
			orig := encodeImage(t, tc.format)
			signed := signBytes(t, s, orig, tc.format, prov)
			r := validate(t, tc.mime, signed)
			if r.Error != "" || r.ActiveManifest == "" {
				t.Fatalf("no manifest read: %s", r.Raw)
			}
			if f := failures(r); len(f) > 0 {
				t.Fatalf("validation failures %+v\n%s", f, r.Raw)
			}
			for _, code := range []string{"claimSignature.validated", "claimSignature.insideValidity", "assertion.dataHash.match", "assertion.hashedURI.match"} {
				if !r.Has(code) {
					t.Errorf("no %s among the successes\n%s", code, r.Raw)
				}
			}
			m := r.Manifests[r.ActiveManifest]
			if len(m.ClaimGeneratorInfo) == 0 || m.ClaimGeneratorInfo[0].Name != "threadbox" || m.ClaimGeneratorInfo[0].Version != "1.2.3" {
				t.Errorf("claim generator %+v", m.ClaimGeneratorInfo)
			}
			if m.SignatureInfo.Alg != "Es256" || !strings.Contains(m.SignatureInfo.Issuer, "threadbox test") {
				t.Errorf("signature info %+v", m.SignatureInfo)
			}
			want := sha256.Sum256(orig)
			var seen []string
			for _, a := range m.Assertions {
				seen = append(seen, a.Label)
				switch a.Label {
				case labelThreadbox:
					var got threadboxAssertion
					if err := json.Unmarshal(a.Data, &got); err != nil {
						t.Fatal(err)
					}
					wantA := threadboxAssertion{Org: "org_1", Thread: "thr_1", ToolUseID: "toolu_1", Path: prov.Path, SHA256: hex.EncodeToString(want[:])}
					if got != wantA {
						t.Errorf("threadbox assertion %+v, want %+v", got, wantA)
					}
				case "c2pa.actions.v2":
					if !strings.Contains(string(a.Data), `"c2pa.created"`) || !strings.Contains(string(a.Data), SourceAlgorithmic) {
						t.Errorf("actions %s", a.Data)
					}
				}
			}
			if !contains(seen, labelThreadbox) || !contains(seen, "c2pa.actions.v2") {
				t.Errorf("assertions %v lack the threadbox or actions assertion", seen)
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A byte changed in the image data after signing breaks the hard binding;
// a byte changed inside the manifest breaks the signature or an
// assertion's hash.
func TestTamperedMediaFails(t *testing.T) {
	s := testSigner(t)
	for _, tc := range media {
		t.Run(string(tc.format), func(t *testing.T) {
			signed := signBytes(t, s, encodeImage(t, tc.format), tc.format, Provenance{Org: "org_1"})
			flipped := bytes.Clone(signed)
			flipped[tc.flipAt(flipped)] ^= 0x01 // in the content, outside the manifest
			r := validate(t, tc.mime, flipped)
			if !r.Has("assertion.dataHash.mismatch") {
				t.Fatalf("a flipped byte was not reported as a hash mismatch:\n%s", r.Raw)
			}
		})
	}
}

// A file that already carries a manifest is signed afresh: the old
// manifest is dropped, and the data hash and the threadbox assertion's
// SHA-256 still agree with what the reader sees.
func TestResigningReplacesTheManifest(t *testing.T) {
	s := testSigner(t)
	for _, tc := range resignable {
		t.Run(string(tc.format), func(t *testing.T) {
			orig := encodeImage(t, tc.format)
			once := signBytes(t, s, orig, tc.format, Provenance{Org: "org_1"})
			twice := signBytes(t, s, once, tc.format, Provenance{Org: "org_2"})
			if len(twice) != len(once) {
				t.Errorf("re-signed size %d, want %d (one manifest)", len(twice), len(once))
			}
			r := validate(t, tc.mime, twice)
			if f := failures(r); len(f) > 0 || r.ActiveManifest == "" {
				t.Fatalf("validation failures %+v\n%s", f, r.Raw)
			}
			if len(r.Manifests) != 1 {
				t.Errorf("%d manifests, want 1", len(r.Manifests))
			}
		})
	}
}

func TestSignRefusesMalformedFiles(t *testing.T) {
	s := testSigner(t)
	pngBytes := encodeImage(t, PNG)
	jpegBytes := encodeImage(t, JPEG)
	for _, tc := range []struct {
		name   string
		format Format
		b      []byte
	}{
		{"png magic", PNG, []byte("GIF89a not a png at all")},
		{"png truncated chunk", PNG, pngBytes[:20]},
		{"png without IHDR", PNG, append(append([]byte{}, pngMagic...), 0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82)},
		{"jpeg magic", JPEG, []byte("not a jpeg")},
		{"jpeg truncated", JPEG, jpegBytes[:30]},
		{"jpeg bad marker", JPEG, []byte{0xFF, 0xD8, 0x00, 0x11, 0x22, 0x33}},
		{"empty", PNG, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Sign(context.Background(), bytes.NewReader(tc.b), int64(len(tc.b)), tc.format, Provenance{})
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

func TestIssuerIsKept(t *testing.T) {
	dir := t.TempDir()
	k1, c1, created, err := SelfSignedIssuer(dir, "x")
	if err != nil || !created {
		t.Fatalf("first: %v %v", err, created)
	}
	k2, c2, created, err := SelfSignedIssuer(dir, "x")
	if err != nil || created {
		t.Fatalf("second: %v %v", err, created)
	}
	if !k1.Equal(k2) || len(c1) != 2 || !c1[0].Equal(c2[0]) {
		t.Fatal("the issuer generated first was not the one loaded again")
	}
	if _, err := NewSigner(k1, c1[1:], ""); err == nil {
		t.Fatal("a chain not starting with the key's certificate was accepted")
	}
}

// A GIF87a becomes a GIF89a, the version with extensions, and still
// validates.
func TestGIF87a(t *testing.T) {
	s := testSigner(t)
	orig := encodeImage(t, GIF)
	copy(orig, "GIF87a")
	signed := signBytes(t, s, orig, GIF, Provenance{Org: "org_1"})
	if string(signed[:6]) != "GIF89a" {
		t.Fatalf("header %q", signed[:6])
	}
	if r := validate(t, "image/gif", signed); len(r.Failures()) > 0 || r.ActiveManifest == "" {
		t.Fatalf("validation failures %+v\n%s", r.Failures(), r.Raw)
	}
}

// Any range of a signed file read at an offset is the same bytes as the
// stream.
func TestAssetReaderAt(t *testing.T) {
	s := testSigner(t)
	type fileCase struct {
		format Format
		b      []byte
	}
	var files []fileCase
	for _, tc := range media {
		files = append(files, fileCase{tc.format, encodeImage(t, tc.format)})
	}
	for _, tc := range bmffCases {
		files = append(files, fileCase{tc.format, tc.b()})
	}
	for _, tc := range files {
		orig := tc.b
		a, err := s.Sign(context.Background(), bytes.NewReader(orig), int64(len(orig)), tc.format, Provenance{Org: "o"})
		if err != nil {
			t.Fatal(err)
		}
		whole, _ := io.ReadAll(a.Reader(bytes.NewReader(orig)))
		ra := a.ReaderAt(bytes.NewReader(orig))
		for _, r := range [][2]int{{0, 1}, {0, len(whole)}, {5, 4000}, {len(whole) - 7, 7}, {30, 9000}} {
			end := min(r[0]+r[1], len(whole))
			got := make([]byte, end-r[0])
			if n, err := ra.ReadAt(got, int64(r[0])); n != len(got) || (err != nil && err != io.EOF) || !bytes.Equal(got, whole[r[0]:end]) {
				t.Fatalf("%s: ReadAt(%d, %d) = %d, %v; not the stream's bytes", tc.format, r[0], len(got), n, err)
			}
		}
		if n, err := ra.ReadAt(make([]byte, 4), int64(len(whole))); n != 0 || err != io.EOF {
			t.Fatalf("%s: past the end: %d %v", tc.format, n, err)
		}
	}
}

// A RIFF chunk of odd length carries a pad byte that the manifest's
// exclusion does not cover, so the store is kept even: provenances one
// byte apart, one of which would make it odd, both validate.
func TestWAVStoreOfEitherParity(t *testing.T) {
	s := testSigner(t)
	for _, org := range []string{"o", "oo"} {
		signed := signBytes(t, s, testWAV(), WAV, Provenance{Org: org})
		if r := validate(t, "audio/wav", signed); len(r.Failures()) > 0 || r.ActiveManifest == "" {
			t.Fatalf("org %q: validation failures %+v\n%s", org, r.Failures(), r.Raw)
		}
	}
}

func TestSVGLayoutRefusals(t *testing.T) {
	s := testSigner(t)
	for _, tc := range []struct{ name, svg string }{
		{"no root", `<?xml version="1.0"?><html></html>`},
		{"prefixed root", `<svg:svg xmlns:svg="http://www.w3.org/2000/svg"></svg:svg>`},
		{"empty root", `<svg xmlns="http://www.w3.org/2000/svg"/>`},
		{"unclosed tag", `<svg xmlns="http://www.w3.org/2000/svg" width="1`},
		{"unclosed comment", `<!-- <svg>`},
		{"a manifest already", `<svg><metadata><c2pa:manifest xmlns:c2pa="http://c2pa.org/manifest">AAAA</c2pa:manifest></metadata></svg>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Sign(context.Background(), bytes.NewReader([]byte(tc.svg)), int64(len(tc.svg)), SVG, Provenance{}); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A simple WebP (lossy VP8, lossless VP8L with and without alpha) gets the
// VP8X header of the extended format, with its canvas size and alpha
// flag, and validates.
func TestWebPGetsTheExtendedHeader(t *testing.T) {
	s := testSigner(t)
	for _, tc := range []struct {
		file          string
		width, height int
		alpha         bool
	}{{"lossy.webp", 40, 30, false}, {"lossless.webp", 40, 30, false}, {"alpha.webp", 20, 10, true}} {
		t.Run(tc.file, func(t *testing.T) {
			signed := signBytes(t, s, readTestdata(t, tc.file), WEBP, Provenance{Org: "org_1"})
			if string(signed[12:16]) != "VP8X" {
				t.Fatalf("first chunk %q, want VP8X", signed[12:16])
			}
			w := int(signed[24]) | int(signed[25])<<8 | int(signed[26])<<16
			h := int(signed[27]) | int(signed[28])<<8 | int(signed[29])<<16
			if w+1 != tc.width || h+1 != tc.height || (signed[20]&0x10 != 0) != tc.alpha {
				t.Errorf("VP8X canvas %dx%d alpha %v, want %dx%d %v", w+1, h+1, signed[20]&0x10 != 0, tc.width, tc.height, tc.alpha)
			}
			if got := binary.LittleEndian.Uint32(signed[4:]); int(got) != len(signed)-8 {
				t.Errorf("RIFF size %d, want %d", got, len(signed)-8)
			}
			if r := validate(t, "image/webp", signed); len(r.Failures()) > 0 || r.ActiveManifest == "" {
				t.Fatalf("validation failures %+v\n%s", r.Failures(), r.Raw)
			}
		})
	}
}

// testMP3 is ten MPEG-1 layer III frames (128 kbit/s, 44.1 kHz) of
// silence, after tag when it is not nil.
func testMP3(tag []byte) []byte {
	out := append([]byte{}, tag...)
	for range 10 {
		frame := make([]byte, 417)
		copy(frame, []byte{0xff, 0xfb, 0x90, 0x64})
		out = append(out, frame...)
	}
	return out
}

// An MP3 whose ID3 tag has frames of its own (v2.3 and v2.4) keeps them
// beside the manifest's GEOB frame, and validates.
func TestMP3KeepsItsTag(t *testing.T) {
	s := testSigner(t)
	frame := func(v byte, id, body string) []byte {
		h := make([]byte, 10)
		copy(h, id)
		if v == 4 {
			putSyncsafe(h[4:8], uint32(len(body)))
		} else {
			binary.BigEndian.PutUint32(h[4:8], uint32(len(body)))
		}
		return append(h, body...)
	}
	for _, v := range []byte{3, 4} {
		body := append(frame(v, "TIT2", "\x00A plot's tone"), frame(v, "TSSE", "\x00Lavf")...)
		body = append(body, make([]byte, 64)...) // padding
		tag := []byte{'I', 'D', '3', v, 0, 0, 0, 0, 0, 0}
		putSyncsafe(tag[6:], uint32(len(body)))
		orig := testMP3(append(tag, body...))
		signed := signBytes(t, s, orig, MP3, Provenance{Org: "org_1"})
		if !bytes.Contains(signed, []byte("A plot's tone")) || !bytes.Contains(signed, []byte("TSSE")) {
			t.Fatalf("v2.%d: the tag's frames were not kept", v)
		}
		if r := validate(t, "audio/mpeg", signed); len(r.Failures()) > 0 || r.ActiveManifest == "" {
			t.Fatalf("v2.%d: validation failures %+v\n%s", v, r.Failures(), r.Raw)
		}
	}
}

// testTIFF is an uncompressed 16x8 RGB TIFF of one strip in byte order
// bo, with pages image file directories (a page after the first is a
// copy of the first).
func testTIFF(bo binary.ByteOrder, pages int) []byte {
	const w, h = 16, 8
	var b bytes.Buffer
	if bo == binary.LittleEndian {
		b.WriteString("II")
	} else {
		b.WriteString("MM")
	}
	binary.Write(&b, bo, uint16(42))
	binary.Write(&b, bo, uint32(8+3*w*h))
	for y := range h {
		for x := range w {
			b.Write([]byte{uint8(x * 16), uint8(y * 32), 90})
		}
	}
	type entry struct {
		tag, typ uint16
		count    uint32
		value    uint32
	}
	bps := uint32(0) // bits per sample, 3 shorts out of line
	entries := []entry{
		{256, 3, 1, w}, {257, 3, 1, h}, {258, 3, 3, bps}, {259, 3, 1, 1}, {262, 3, 1, 2},
		{273, 4, 1, 8}, {277, 3, 1, 3}, {278, 3, 1, h}, {279, 4, 1, 3 * w * h}, {284, 3, 1, 1},
	}
	ifdLen := uint32(2 + 12*len(entries) + 4)
	for p := range pages {
		at := uint32(b.Len())
		bpsAt := at + ifdLen
		binary.Write(&b, bo, uint16(len(entries)))
		for _, e := range entries {
			binary.Write(&b, bo, e.tag)
			binary.Write(&b, bo, e.typ)
			binary.Write(&b, bo, e.count)
			switch {
			case e.tag == 258:
				binary.Write(&b, bo, bpsAt)
			case e.typ == 3 && e.count == 1:
				binary.Write(&b, bo, uint16(e.value))
				binary.Write(&b, bo, uint16(0))
			default:
				binary.Write(&b, bo, e.value)
			}
		}
		next := uint32(0)
		if p < pages-1 {
			next = bpsAt + 6
		}
		binary.Write(&b, bo, next)
		for range 3 {
			binary.Write(&b, bo, uint16(8))
		}
	}
	return b.Bytes()
}

// testFLAC is a FLAC stream of 4096 samples of 16-bit mono at 8 kHz in
// one frame with a verbatim subframe: a sawtooth.
func testFLAC() []byte {
	const samples = 4096
	var b bytes.Buffer
	b.WriteString("fLaC")
	b.Write([]byte{0x80, 0, 0, 34}) // STREAMINFO, the last metadata block
	si := make([]byte, 34)
	binary.BigEndian.PutUint16(si[0:], samples)
	binary.BigEndian.PutUint16(si[2:], samples)
	// sample rate 8000 (20 bits), channels-1 = 0 (3 bits), bps-1 = 15 (5 bits), total samples (36 bits)
	v := uint64(8000)<<44 | uint64(0)<<41 | uint64(15)<<36 | samples
	binary.BigEndian.PutUint64(si[10:], v)
	b.Write(si)
	// Frame header: sync, fixed block size, block size 4096 (code 12), 8 kHz (code 4: 8 kHz),
	// mono (0), 16 bits (code 4), frame number 0, then CRC-8.
	hdr := []byte{0xff, 0xf8, 0xc4, 0x08, 0x00}
	hdr = append(hdr, crc8(hdr))
	frame := append([]byte{}, hdr...)
	frame = append(frame, 0x02) // verbatim subframe, no wasted bits
	for i := range samples {
		frame = binary.BigEndian.AppendUint16(frame, uint16(int16((i%100)*500-25000)))
	}
	frame = binary.BigEndian.AppendUint16(frame, crc16(frame))
	b.Write(frame)
	return b.Bytes()
}

func crc8(b []byte) byte {
	var c byte
	for _, x := range b {
		c ^= x
		for range 8 {
			if c&0x80 != 0 {
				c = c<<1 ^ 0x07
			} else {
				c <<= 1
			}
		}
	}
	return c
}

func crc16(b []byte) uint16 {
	var c uint16
	for _, x := range b {
		c ^= uint16(x) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x8005
			} else {
				c <<= 1
			}
		}
	}
	return c
}

// A big-endian TIFF of one page and a little-endian one of two validate
// and keep every page's directory; a FLAC behind an ID3 tag of its own
// keeps the tag's frames.
func TestTIFFAndFLACVariants(t *testing.T) {
	s := testSigner(t)
	for _, tc := range []struct {
		name, mime string
		format     Format
		b          []byte
	}{
		{"tiff big-endian", "image/tiff", TIFF, testTIFF(binary.BigEndian, 1)},
		{"tiff three pages", "image/tiff", TIFF, testTIFF(binary.LittleEndian, 3)},
		{"flac after an ID3 tag", "audio/flac", FLAC, append([]byte{'I', 'D', '3', 3, 0, 0, 0, 0, 0, 20, 'T', 'I', 'T', '2', 0, 0, 0, 10, 0, 0, 0, 'a', ' ', 'c', 'h', 'i', 'r', 'p', '!', '!'}, testFLAC()...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signed := signBytes(t, s, tc.b, tc.format, Provenance{Org: "org_1"})
			if r := validate(t, tc.mime, signed); len(r.Failures()) > 0 || r.ActiveManifest == "" {
				t.Fatalf("validation failures %+v\n%s", r.Failures(), r.Raw)
			}
			if tc.format == FLAC && !bytes.Contains(signed, []byte("a chirp!!")) {
				t.Error("the FLAC's own ID3 frame was dropped")
			}
		})
	}
}

func TestTIFFAndFLACRefusals(t *testing.T) {
	s := testSigner(t)
	big := testTIFF(binary.LittleEndian, 1)
	big[2] = 43
	twoC2PA := testTIFF(binary.LittleEndian, 2)
	// The second page's first entry (ImageWidth) relabelled as a C2PA entry.
	second := binary.LittleEndian.Uint32(twoC2PA[8+3*16*8+2+12*10:])
	binary.LittleEndian.PutUint16(twoC2PA[second+2:], tiffC2PATag)
	loop := testTIFF(binary.LittleEndian, 1)
	binary.LittleEndian.PutUint32(loop[8+3*16*8+2+12*10:], binary.LittleEndian.Uint32(loop[4:]))
	for _, tc := range []struct {
		name   string
		format Format
		b      []byte
	}{
		{"bigtiff", TIFF, big},
		{"tiff C2PA entry outside IFD0", TIFF, twoC2PA},
		{"tiff IFD loop", TIFF, loop},
		{"tiff IFD past the end", TIFF, testTIFF(binary.LittleEndian, 1)[:300]},
		{"not a tiff", TIFF, []byte("IX*\x00\x08\x00\x00\x00")},
		{"not a flac", FLAC, []byte("fLaX and more bytes")},
		{"id3 then not a flac", FLAC, testMP3([]byte{'I', 'D', '3', 4, 0, 0, 0, 0, 0, 0})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Sign(context.Background(), bytes.NewReader(tc.b), int64(len(tc.b)), tc.format, Provenance{}); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}
