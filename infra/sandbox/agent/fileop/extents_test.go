package fileop_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"threadbox/infra/sandbox/agent/fileop"
	"threadbox/infra/sparse"
	"threadbox/infra/sparse/sparsetest"
)

// TestServeOpenExtents: an open-extents reply carries a sparse file's
// data only, and sparse.Read puts it back where it lay.
func TestServeOpenExtents(t *testing.T) {
	fs, d := folders(t)
	const size = 64 << 20
	pieces := []sparsetest.Piece{{Off: 0, Data: "head"}, {Off: size - 4, Data: "tail"}}
	sparsetest.Make(t, filepath.Join(d.Outputs, "sparse"), size, pieces...)
	_, rep, rest := serve(t, fs, d.Skills, fileop.Request{Op: fileop.OpOpenExtents, Path: "/mnt/user-data/outputs/sparse"}, nil)
	if rep.Error != nil || rep.Info == nil || rep.Info.Size != size {
		t.Fatalf("reply %+v", rep)
	}
	if len(rest) > 1<<20 {
		t.Errorf("%d bytes sent for a file of 8 data bytes", len(rest))
	}
	got := make([]byte, size)
	if err := sparse.Read(bytes.NewReader(rest), size, sparsetest.BufAt(got)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sparsetest.Want(size, pieces...)) {
		t.Error("the extents do not read as the file")
	}
}
