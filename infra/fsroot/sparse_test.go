package fsroot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"threadbox/domain/file"
	"threadbox/infra/sparse/sparsetest"
)

// TestCopyFileKeepsHoles: an output of 1 TiB with three small writes (a
// sandbox's `truncate -s 1T`) is listed with its holes, and copied to
// another container by its data alone: the copy has the file's size and
// content, takes its few blocks, and counts its data against the limit.
// A limit below the data refuses the copy and leaves nothing behind.
func TestCopyFileKeepsHoles(t *testing.T) {
	base := t.TempDir()
	dirsOf := func(id string) Dirs {
		root := filepath.Join(base, id)
		return Dirs{Workspace: filepath.Join(root, "w"), Uploads: filepath.Join(root, "u"), Outputs: filepath.Join(root, "o"), Skills: filepath.Join(root, "s")}
	}
	for _, id := range []string{"c1", "c2"} {
		d := dirsOf(id)
		for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := NewContainers(dirsOf, Options{})
	ctx := context.Background()
	const size = 1 << 40
	at := []sparsetest.Piece{{Off: 0, Data: "head"}, {Off: size / 2, Data: "middle"}, {Off: size - 4, Data: "tail"}}
	sparsetest.Make(t, filepath.Join(dirsOf("c1").Outputs, "disk.img"), size, at...)
	if err := os.WriteFile(filepath.Join(dirsOf("c1").Outputs, "notes.txt"), []byte("some notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	const low, high = int64(len("headmiddletail")), int64(1 << 20)

	infos, err := c.Walk(ctx, "c1", "/mnt/user-data/outputs")
	if err != nil || len(infos) != 2 {
		t.Fatalf("walk: %v %v", infos, err)
	}
	if img := infos[0]; img.Rel != "disk.img" || img.Size != size || img.Data() < low || img.Data() > high {
		t.Fatalf("the sparse file is listed as %+v (data %d), want its size %d and data of %d to %d", img, img.Data(), int64(size), low, high)
	}
	if notes := infos[1]; notes.Holes != 0 || notes.Data() != int64(len("some notes")) {
		t.Fatalf("a file without holes is listed as %+v", notes)
	}

	const p = "/mnt/user-data/outputs/disk.img"
	sparsetest.Within(t, 2*time.Minute, func() error {
		info, n, err := c.CopyFile(ctx, "c1", "c2", p, high)
		if err != nil {
			return err
		}
		if info.Size != size || n < low || n > high {
			return fmt.Errorf("the copy: %+v with %d bytes of data, want %d bytes with %d to %d of data", info, n, int64(size), low, high)
		}
		return nil
	})
	cp := filepath.Join(dirsOf("c2").Outputs, "disk.img")
	if got := sparsetest.Allocated(t, cp); got > high {
		t.Fatalf("the copy takes %d bytes on disk", got)
	}
	f, err := os.Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, pc := range append(at, sparsetest.Piece{Off: size / 4, Data: "\x00\x00\x00\x00"}) {
		b := make([]byte, len(pc.Data))
		if _, err := f.ReadAt(b, pc.Off); err != nil || !bytes.Equal(b, []byte(pc.Data)) {
			t.Fatalf("the copy holds %q at %d, want %q (%v)", b, pc.Off, pc.Data, err)
		}
	}

	if _, _, err := c.CopyFile(ctx, "c1", "c2", "/mnt/user-data/outputs/notes.txt", 4); !errors.Is(err, file.ErrTooLarge) {
		t.Fatalf("a copy past its limit: %v, want ErrTooLarge", err)
	}
	left, err := os.ReadDir(dirsOf("c2").Outputs)
	if err != nil || len(left) != 1 {
		t.Fatalf("after a refused copy the folder holds %v (%v), want the sparse copy alone", left, err)
	}
}
