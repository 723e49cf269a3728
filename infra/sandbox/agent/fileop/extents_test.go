package fileop_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"threadbox/infra/sandbox/agent/fileop"
	"threadbox/infra/sparse"
)

// bufAt is a WriterAt over a byte slice.
type bufAt []byte

func (b bufAt) WriteAt(p []byte, off int64) (int, error) { return copy(b[off:], p), nil }

// TestServeOpenExtents: an open-extents reply carries a sparse file's
// data only, and sparse.Read puts it back where it lay.
func TestServeOpenExtents(t *testing.T) {
	fs, d := folders(t)
	const size = 64 << 20
	f, err := os.Create(filepath.Join(d.Outputs, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), size-4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, rep, rest := serve(t, fs, d.Skills, fileop.Request{Op: fileop.OpOpenExtents, Path: "/mnt/user-data/outputs/sparse"}, nil)
	if rep.Error != nil || rep.Info == nil || rep.Info.Size != size {
		t.Fatalf("reply %+v", rep)
	}
	if len(rest) > 1<<20 {
		t.Errorf("%d bytes sent for a file of 8 data bytes", len(rest))
	}
	got := make([]byte, size)
	if err := sparse.Read(bytes.NewReader(rest), size, bufAt(got)); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	copy(want, "head")
	copy(want[size-4:], "tail")
	if !bytes.Equal(got, want) {
		t.Error("the extents do not read as the file")
	}
}
