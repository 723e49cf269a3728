// Package c2pa signs generated media with Content Credentials: a C2PA
// manifest store (JUMBF) holding a claim over an actions assertion, a hard
// binding of the manifest to the file's bytes (a data hash, or a BMFF hash
// for MP4, MOV, M4A, HEIC and AVIF) and a threadbox assertion, signed with
// COSE_Sign1 (ES256) by the operator's certificate chain (its key in
// memory or behind a signing hook), timestamped by an RFC 3161 authority
// when one is configured. The
// signed file is derived from the stored one as it is read: the stored
// file is never changed, and the signed form streams from it with the
// manifest inserted where the format keeps it.
package c2pa

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"

	"github.com/fxamacker/cbor/v2"
	"github.com/veraison/go-cose"
)

// Format is a media format the signer can embed a manifest in.
type Format string

// The formats signed.
const (
	PNG  Format = "png"
	JPEG Format = "jpeg"
	GIF  Format = "gif"
	WAV  Format = "wav"
	SVG  Format = "svg"
	WEBP Format = "webp"
	MP3  Format = "mp3"
	TIFF Format = "tiff"
	FLAC Format = "flac"
	MP4  Format = "mp4"
	MOV  Format = "mov"
	M4A  Format = "m4a"
	HEIC Format = "heic"
	AVIF Format = "avif"
)

// Formats lists every format the signer embeds manifests in.
var Formats = []Format{PNG, JPEG, GIF, WAV, SVG, WEBP, MP3, TIFF, FLAC, MP4, MOV, M4A, HEIC, AVIF}

// FormatOf returns the format of a MIME type, and false for a type the
// signer does not sign.
func FormatOf(mime string) (Format, bool) {
	switch mime {
	case "image/png":
		return PNG, true
	case "image/jpeg":
		return JPEG, true
	case "image/gif":
		return GIF, true
	case "audio/wav", "audio/x-wav", "audio/wave":
		return WAV, true
	case "image/svg+xml":
		return SVG, true
	case "image/webp":
		return WEBP, true
	case "audio/mpeg", "audio/mp3":
		return MP3, true
	case "image/tiff":
		return TIFF, true
	case "audio/flac", "audio/x-flac":
		return FLAC, true
	case "video/mp4", "application/mp4", "video/x-m4v":
		return MP4, true
	case "video/quicktime":
		return MOV, true
	case "audio/mp4", "audio/x-m4a", "audio/m4a":
		return M4A, true
	case "image/heic", "image/heif":
		return HEIC, true
	case "image/avif":
		return AVIF, true
	}
	return "", false
}

// ErrMalformed is returned for a file whose structure is not the format
// its type says, which is then not signed.
var ErrMalformed = errors.New("c2pa: malformed file")

// Signer signs files with one issuer's key and certificate chain.
type Signer struct {
	cose    cose.Signer
	chain   [][]byte // DER, the signing certificate first
	version string
	enc     cbor.EncMode
	tsa     Timestamper
	// hook signs instead of cose, with the signing certificate's key.
	hook    SignHook
	hookKey *ecdsa.PublicKey
	// tokenRoom is the room a signature keeps for a timestamp token: the
	// largest token seen plus a margin, grown when one does not fit.
	tokenRoom atomic.Int64
}

// Timestamper returns an RFC 3161 timestamp token over data (TSA).
type Timestamper interface {
	Stamp(ctx context.Context, data []byte) ([]byte, error)
}

// NewSigner returns a signer with an ECDSA P-256 key and its certificate
// chain (the signing certificate first), naming threadbox version as the
// claim generator. The key is any crypto.Signer of such a key: one in
// memory, or one whose signing happens elsewhere (RemoteKey).
func NewSigner(key crypto.Signer, chain []*x509.Certificate, version string) (*Signer, error) {
	if key == nil {
		return nil, errors.New("c2pa: no signing key")
	}
	kp, ok := key.Public().(*ecdsa.PublicKey)
	if !ok || kp.Curve != elliptic.P256() {
		return nil, errors.New("c2pa: the signing key must be an ECDSA P-256 key (ES256)")
	}
	if len(chain) == 0 {
		return nil, errors.New("c2pa: the certificate chain is empty")
	}
	pub, ok := chain[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(kp) {
		return nil, errors.New("c2pa: the first certificate of the chain is not the signing key's")
	}
	cs, err := cose.NewSigner(cose.AlgorithmES256, key)
	if err != nil {
		return nil, fmt.Errorf("c2pa: %w", err)
	}
	sg, err := newSigner(chain, version)
	if err != nil {
		return nil, err
	}
	sg.cose = cs
	return sg, nil
}

// newSigner returns a signer of chain without its key.
func newSigner(chain []*x509.Certificate, version string) (*Signer, error) {
	enc, err := newEncoder()
	if err != nil {
		return nil, fmt.Errorf("c2pa: %w", err)
	}
	der := make([][]byte, len(chain))
	for i, c := range chain {
		der[i] = c.Raw
	}
	if version == "" {
		version = "dev"
	}
	return &Signer{chain: der, version: version, enc: enc}, nil
}

// WithTimestamps makes the signer ask t for a timestamp of every
// signature; it returns s.
func (s *Signer) WithTimestamps(t Timestamper) *Signer {
	s.tsa = t
	s.tokenRoom.Store(initialTokenRoom)
	return s
}

// Asset is a signed file: the stored file's bytes with the manifest
// inserted, read from the stored file as it is sent.
type Asset struct {
	// Size is the signed file's length in bytes.
	Size int64
	// SHA256 is the SHA-256 of the file as written (before signing).
	SHA256 [sha256.Size]byte
	// Tag names this signature: the hex of the first bytes of the
	// manifest's SHA-256, which differs between two signings.
	Tag   string
	parts []part
}

// part is either a range of the stored file or inserted bytes.
type part struct {
	off, n int64
	data   []byte
}

// Reader returns the signed file's bytes, reading r (the stored file)
// from the offsets the asset was built over.
func (a *Asset) Reader(r io.ReaderAt) io.Reader {
	rs := make([]io.Reader, len(a.parts))
	for i, p := range a.parts {
		if p.data != nil {
			rs[i] = &byteReader{b: p.data}
		} else {
			rs[i] = io.NewSectionReader(r, p.off, p.n)
		}
	}
	return io.MultiReader(rs...)
}

// ReaderAt returns the signed file's bytes at any offset, reading r (the
// stored file) where they are the stored file's.
func (a *Asset) ReaderAt(r io.ReaderAt) io.ReaderAt { return &assetReader{a: a, r: r} }

type assetReader struct {
	a *Asset
	r io.ReaderAt
}

func (ar *assetReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("c2pa: negative offset")
	}
	n := 0
	var at int64
	for _, pt := range ar.a.parts {
		size := pt.n
		if pt.data != nil {
			size = int64(len(pt.data))
		}
		if len(p) == 0 {
			break
		}
		if off >= at+size {
			at += size
			continue
		}
		rel := off - at
		want := min(int64(len(p)), size-rel)
		var m int
		var err error
		if pt.data != nil {
			m = copy(p[:want], pt.data[rel:])
		} else {
			m, err = ar.r.ReadAt(p[:want], pt.off+rel)
			if err == io.EOF && int64(m) == want {
				err = nil
			}
		}
		n += m
		p = p[m:]
		off += int64(m)
		if err != nil {
			return n, err
		}
		at += size
	}
	if len(p) > 0 {
		return n, io.EOF
	}
	return n, nil
}

type byteReader struct{ b []byte }

func (b *byteReader) Read(p []byte) (int, error) {
	if len(b.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

// span is a byte range of the stored file, or bytes that replace it in
// the signed file (lit; n may be 0 for bytes inserted).
type span struct {
	off, n int64
	lit    []byte
}

// size is the span's length in the signed file.
func (k span) size() int64 {
	if k.lit != nil {
		return int64(len(k.lit))
	}
	return k.n
}

// layout is where a format puts a manifest: the ranges of the stored file
// kept (a manifest already there is dropped, a header may be rewritten)
// and the offset, in the signed file, where the manifest's wrapper goes.
type layout struct {
	// keep returns the kept ranges for a wrapper of wrapLen bytes (a
	// container's size field may count it).
	keep     func(wrapLen int64) []span
	insertAt int64
	wrap     func(store []byte) []byte
	// even asks for a manifest store of even length (a RIFF chunk's
	// pad byte is not part of the manifest's exclusion).
	even bool
	// bmff, for a BMFF file, returns its top-level boxes in the signed
	// file: the binding is then a BMFF hash over them, not a data hash.
	bmff func(wrapLen int64) []bmffTopBox
}

// fixed is a keep function for formats whose kept bytes do not depend on
// the wrapper.
func fixed(s []span) func(int64) []span { return func(int64) []span { return s } }

// Sign builds the signed form of the size bytes of r in format f: it reads
// the file once to hash it, builds and signs the manifest, and returns the
// asset to stream with Asset.Reader over the same r.
func (s *Signer) Sign(ctx context.Context, r io.ReaderAt, size int64, f Format, p Provenance) (*Asset, error) {
	a, err := s.sign1(ctx, r, size, f, p)
	var big *tokenTooLarge
	if errors.As(err, &big) {
		// The token outgrew the room kept for it: keep more, and sign
		// again (the file is hashed again).
		s.tokenRoom.Store(int64(big.n) + tokenMargin)
		a, err = s.sign1(ctx, r, size, f, p)
	}
	return a, err
}

func (s *Signer) sign1(ctx context.Context, r io.ReaderAt, size int64, f Format, p Provenance) (*Asset, error) {
	var lay layout
	var err error
	switch f {
	case PNG:
		lay, err = pngLayout(r, size)
	case JPEG:
		lay, err = jpegLayout(r, size)
	case GIF:
		lay, err = gifLayout(r, size)
	case WAV:
		lay, err = wavLayout(r, size)
	case SVG:
		lay, err = svgLayout(r, size)
	case WEBP:
		lay, err = webpLayout(r, size)
	case MP3:
		lay, err = mp3Layout(r, size)
	case TIFF:
		lay, err = tiffLayout(r, size)
	case FLAC:
		lay, err = flacLayout(r, size)
	case MP4, MOV, M4A, HEIC, AVIF:
		lay, err = bmffLayout(r, size)
	default:
		return nil, fmt.Errorf("c2pa: format %q is not signed", f)
	}
	if err != nil {
		return nil, err
	}
	in := manifestInput{
		label: "urn:c2pa:" + newUUID(), instanceID: "xmp:iid:" + newUUID(), version: s.version,
		dataHash: make([]byte, sha256.Size), written: make([]byte, sha256.Size), prov: p,
		exclusion: exclusion{Start: lay.insertAt}, bmff: lay.bmff != nil,
		tokenRoom: int(s.tokenRoom.Load()),
	}
	// The exclusion's length is the wrapper's, which the exclusion's
	// encoding is part of: settle it first (the hashes' values do not
	// change the manifest's length), then hash and sign once.
	settled := false
	for range 8 {
		store, err := s.buildStore(ctx, in)
		if err != nil {
			return nil, err
		}
		if lay.even && len(store)%2 == 1 {
			in.pad++
			continue
		}
		n := int64(len(lay.wrap(store)))
		if n == in.exclusion.Length {
			settled = true
			break
		}
		in.exclusion.Length = n
	}
	if !settled {
		return nil, errors.New("c2pa: the manifest's size did not settle")
	}
	if lay.bmff != nil && in.exclusion.Length > bmffMaxWrap {
		return nil, errors.New("c2pa: the manifest is too large for a BMFF file")
	}
	keep := lay.keep(in.exclusion.Length)
	var boxes []bmffTopBox
	if lay.bmff != nil {
		boxes = lay.bmff(in.exclusion.Length)
	}
	if in.written, in.dataHash, err = hashes(r, size, keep, lay.insertAt, in.exclusion.Length, boxes); err != nil {
		return nil, err
	}
	in.final = true
	store, err := s.buildStore(ctx, in)
	if err != nil {
		return nil, err
	}
	wrapped := lay.wrap(store)
	if int64(len(wrapped)) != in.exclusion.Length {
		return nil, errors.New("c2pa: the manifest's size changed when signed")
	}
	a := &Asset{}
	copy(a.SHA256[:], in.written)
	tag := sha256.Sum256(wrapped)
	a.Tag = fmt.Sprintf("%x", tag[:8])
	var at int64
	inserted := false
	add := func(k span) {
		if len(k.lit) > 0 {
			a.parts = append(a.parts, part{data: k.lit})
		} else if k.lit == nil && k.n > 0 {
			a.parts = append(a.parts, part{off: k.off, n: k.n})
		}
	}
	for _, k := range keep {
		if !inserted && at+k.size() > lay.insertAt {
			cut := lay.insertAt - at
			if k.lit != nil && cut > 0 {
				return nil, errors.New("c2pa: the manifest would split a rewritten header")
			}
			add(span{off: k.off, n: cut})
			a.parts = append(a.parts, part{data: wrapped})
			inserted = true
			if k.lit != nil {
				add(k)
			} else {
				add(span{off: k.off + cut, n: k.n - cut})
			}
		} else {
			add(k)
		}
		at += k.size()
	}
	if !inserted {
		a.parts = append(a.parts, part{data: wrapped})
	}
	a.Size = at + int64(len(wrapped))
	return a, nil
}

// hashes reads the file once and returns the SHA-256 of all of it and
// the hard binding's hash of the signed file: the kept ranges in order,
// the manifest's wrapper (wrapLen bytes at insertAt) left out, and for a
// BMFF binding each box's offset hashed before it and the excluded boxes
// left out.
func hashes(r io.ReaderAt, size int64, keep []span, insertAt, wrapLen int64, boxes []bmffTopBox) (written, binding []byte, err error) {
	all := sha256.New()
	bh := &bindingHasher{h: sha256.New()}
	for _, b := range boxes {
		if b.excluded {
			bh.skips = append(bh.skips, [2]int64{b.off, b.off + b.size})
		} else {
			bh.marks = append(bh.marks, b.off)
		}
	}
	buf := make([]byte, 256<<10)
	copyTo := func(w io.Writer, off, n int64) error {
		if _, err := io.CopyBuffer(w, io.NewSectionReader(r, off, n), buf); err != nil {
			return fmt.Errorf("c2pa: read: %w", err)
		}
		return nil
	}
	both := io.MultiWriter(all, bh)
	inserted := false
	insert := func() {
		if !inserted && bh.pos == insertAt {
			bh.pos += wrapLen
			inserted = true
		}
	}
	var at int64
	for _, k := range keep {
		if k.off > at {
			if err := copyTo(all, at, k.off-at); err != nil {
				return nil, nil, err
			}
		}
		insert()
		if k.lit != nil {
			if err := copyTo(all, k.off, k.n); err != nil {
				return nil, nil, err
			}
			bh.Write(k.lit)
		} else {
			off, n := k.off, k.n
			if cut := insertAt - bh.pos; !inserted && cut > 0 && cut < n {
				if err := copyTo(both, off, cut); err != nil {
					return nil, nil, err
				}
				off, n = off+cut, n-cut
				insert()
			}
			if err := copyTo(both, off, n); err != nil {
				return nil, nil, err
			}
		}
		at = k.off + k.n
	}
	if at < size {
		if err := copyTo(all, at, size-at); err != nil {
			return nil, nil, err
		}
	}
	return all.Sum(nil), bh.h.Sum(nil), nil
}

// bindingHasher hashes the signed file's bytes as they are written at
// pos: bytes in skips are left out, and at each of marks (a BMFF box
// start) the offset goes in first, as a big-endian 64-bit number.
type bindingHasher struct {
	h     hash.Hash
	pos   int64
	marks []int64    // ascending
	skips [][2]int64 // ascending, [start, end)
}

func (b *bindingHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		for len(b.marks) > 0 && b.marks[0] < b.pos {
			b.marks = b.marks[1:]
		}
		for len(b.skips) > 0 && b.skips[0][1] <= b.pos {
			b.skips = b.skips[1:]
		}
		if len(b.marks) > 0 && b.marks[0] == b.pos {
			var o [8]byte
			binary.BigEndian.PutUint64(o[:], uint64(b.pos))
			b.h.Write(o[:])
			b.marks = b.marks[1:]
		}
		end := b.pos + int64(len(p))
		if len(b.marks) > 0 {
			end = min(end, b.marks[0])
		}
		skipping := len(b.skips) > 0 && b.skips[0][0] <= b.pos
		if skipping {
			end = min(end, b.skips[0][1])
		} else if len(b.skips) > 0 {
			end = min(end, b.skips[0][0])
		}
		k := end - b.pos
		if !skipping {
			b.h.Write(p[:k])
		}
		p = p[k:]
		b.pos = end
	}
	return n, nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
