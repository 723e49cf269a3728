package sparse

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// bufAt is a WriterAt over a byte slice.
type bufAt []byte

func (b bufAt) WriteAt(p []byte, off int64) (int, error) { return copy(b[off:], p), nil }

// TestWriteKeepsHoles: the extent stream of a sparse file carries its
// data alone, and Read puts it back where it lay; a reader that is not a
// file is sent as one extent.
func TestWriteKeepsHoles(t *testing.T) {
	const size = 64 << 20
	f, err := os.Create(filepath.Join(t.TempDir(), "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), size-4); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if err := Write(&stream, f, size); err != nil {
		t.Fatal(err)
	}
	if stream.Len() > 1<<20 {
		t.Errorf("%d bytes written for a file of 8 data bytes", stream.Len())
	}
	got := make([]byte, size)
	if err := Read(&stream, size, bufAt(got)); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	copy(want, "head")
	copy(want[size-4:], "tail")
	if !bytes.Equal(got, want) {
		t.Error("the extents do not read as the file")
	}
	stream.Reset()
	if err := Write(&stream, bytes.NewReader([]byte("abc")), 3); err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 3)
	if err := Read(&stream, 3, bufAt(small)); err != nil || string(small) != "abc" || stream.Len() != 0 {
		t.Errorf("a reader's stream read back as %q (%v), %d bytes left", small, err, stream.Len())
	}
}

// TestReadRefuses: extents beyond the file, out of order, empty
// or cut short are refused.
func TestReadRefuses(t *testing.T) {
	ext := func(off, n uint64, data string) []byte {
		return append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, off), n), data...)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, stream := range map[string][]byte{
		"beyond the size": cat(ext(8, 4, "abcd"), ext(10, 0, "")),
		"out of order":    cat(ext(4, 2, "ab"), ext(0, 2, "cd"), ext(10, 0, "")),
		"empty extent":    cat(ext(2, 0, ""), ext(10, 0, "")),
		"no end":          ext(0, 2, "ab"),
		"cut short":       ext(0, 4, "ab"),
		"end of another":  ext(11, 0, ""),
	} {
		if err := Read(bytes.NewReader(stream), 10, bufAt(make([]byte, 64))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	got := make([]byte, 10)
	if err := Read(bytes.NewReader(cat(ext(2, 3, "abc"), ext(7, 1, "d"), ext(10, 0, ""))), 10, bufAt(got)); err != nil || string(got) != "\x00\x00abc\x00\x00d\x00\x00" {
		t.Errorf("read %q, %v", got, err)
	}
}
