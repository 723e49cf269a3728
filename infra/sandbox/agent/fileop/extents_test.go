package fileop_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"

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

// extentStdin returns the extent stream of the file at path as a write's
// stdin: chunks of at most fileop.MaxChunkSize and, when ended, the end mark.
func extentStdin(t *testing.T, path string, ended bool) (stdin []byte, size int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if err := sparse.Write(&stream, f, st.Size()); err != nil {
		t.Fatal(err)
	}
	for b := stream.Bytes(); len(b) > 0; {
		n := min(len(b), fileop.MaxChunkSize)
		stdin = append(stdin, fileop.EncodeChunk(b[:n])...)
		b = b[n:]
	}
	if ended {
		stdin = append(stdin, fileop.EncodeChunk(nil)...)
	}
	return stdin, st.Size()
}

// TestServeWriteExtents: a sparse file of 1 TiB written from its extent
// stream keeps its holes (it takes a few blocks, not its size) and its
// bytes, and the reply counts its data. Its data counts against the
// limit, and a stream cut short or ended before its final extent stores
// nothing.
func TestServeWriteExtents(t *testing.T) {
	fs, d := folders(t)
	const size = 1 << 40
	pieces := []sparsetest.Piece{{Off: 0, Data: "head"}, {Off: size / 2, Data: "middle"}, {Off: size - 4, Data: "tail"}}
	src := filepath.Join(t.TempDir(), "disk.img")
	sparsetest.Make(t, src, size, pieces...)
	stdin, got := extentStdin(t, src, true)
	if got != size {
		t.Fatalf("source of %d bytes", got)
	}
	const low, high = int64(len("headmiddletail")), int64(1 << 20)

	req := fileop.Request{Op: fileop.OpWriteExtents, Path: sandbox.WorkspaceDir + "/disk.img", Size: size, Limit: high}
	_, rep, _ := serve(t, fs, d.Skills, req, stdin)
	if rep.Error != nil || rep.Info == nil || rep.Info.Size != size || rep.Info.Rel != "disk.img" {
		t.Fatalf("reply %+v (error %+v)", rep, rep.Error)
	}
	if rep.Data < low || rep.Data > high {
		t.Errorf("reply counts %d bytes of data, want %d to %d", rep.Data, low, high)
	}
	dst := filepath.Join(d.Workspace, "disk.img")
	if a := sparsetest.Allocated(t, dst); a > high {
		t.Errorf("the written file takes %d bytes on disk, its holes filled", a)
	}
	f, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range pieces {
		b := make([]byte, len(p.Data))
		if _, err := f.ReadAt(b, p.Off); err != nil || string(b) != p.Data {
			t.Errorf("at %d: %q, %v; want %q", p.Off, b, err, p.Data)
		}
	}
	zero := make([]byte, 64<<10)
	if _, err := f.ReadAt(zero, size/4); err != nil || !bytes.Equal(zero, make([]byte, len(zero))) {
		t.Errorf("a hole does not read as zeros: %v", err)
	}

	for _, tt := range []struct {
		name  string
		stdin []byte
		limit int64
		kind  error
	}{
		{"over the limit", stdin, low - 1, file.ErrTooLarge},
		{"cut short", stdin[:len(stdin)-4], -1, nil},
		{"ended before the final extent", append(bytes.Clone(stdin[:len(stdin)-4-16]), fileop.EncodeChunk(nil)...), -1, nil},
	} {
		req := fileop.Request{Op: fileop.OpWriteExtents, Path: "/mnt/user-data/outputs/" + tt.name, Size: size, Limit: tt.limit}
		_, rep, _ := serve(t, fs, d.Skills, req, tt.stdin)
		if rep.Error == nil {
			t.Errorf("%s: stored %+v", tt.name, rep.Info)
			continue
		}
		if tt.kind != nil && !errors.Is(rep.Error.Err(), tt.kind) {
			t.Errorf("%s: %v, want %v", tt.name, rep.Error.Err(), tt.kind)
		}
	}
	if left, err := os.ReadDir(d.Outputs); err != nil || len(left) != 0 {
		t.Errorf("failed writes left %v (%v)", left, err)
	}
}
