package sparse_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"threadbox/infra/sparse"
	"threadbox/infra/sparse/sparsetest"
)

// TestWriteKeepsHoles: the extent stream of a sparse file carries its
// data alone, and Read puts it back where it lay; a reader that is not a
// file is sent as one extent.
func TestWriteKeepsHoles(t *testing.T) {
	const size = 64 << 20
	pieces := []sparsetest.Piece{{Off: 0, Data: "head"}, {Off: size - 4, Data: "tail"}}
	path := filepath.Join(t.TempDir(), "sparse")
	sparsetest.Make(t, path, size, pieces...)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stream bytes.Buffer
	if err := sparse.Write(&stream, f, size); err != nil {
		t.Fatal(err)
	}
	if stream.Len() > 1<<20 {
		t.Errorf("%d bytes written for a file of 8 data bytes", stream.Len())
	}
	got := make([]byte, size)
	if err := sparse.Read(&stream, size, sparsetest.BufAt(got)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sparsetest.Want(size, pieces...)) {
		t.Error("the extents do not read as the file")
	}
	stream.Reset()
	if err := sparse.Write(&stream, bytes.NewReader([]byte("abc")), 3); err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 3)
	if err := sparse.Read(&stream, 3, sparsetest.BufAt(small)); err != nil || string(small) != "abc" || stream.Len() != 0 {
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
		if err := sparse.Read(bytes.NewReader(stream), 10, sparsetest.BufAt(make([]byte, 64))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	got := make([]byte, 10)
	if err := sparse.Read(bytes.NewReader(cat(ext(2, 3, "abc"), ext(7, 1, "d"), ext(10, 0, ""))), 10, sparsetest.BufAt(got)); err != nil || string(got) != "\x00\x00abc\x00\x00d\x00\x00" {
		t.Errorf("read %q, %v", got, err)
	}
}
