package hostdirs

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/infra/sparse/sparsetest"
)

// TestSparseFileCostsItsData: a file of 1 TiB with three small writes
// (code in a sandbox makes one with truncate, at no cost to its disk
// quota) is snapshotted, read as the container's file, snapshotted again
// once touched, and restored, each reading its data and never its holes:
// the snapshot's digest marks it as sparse, the container's file reads
// the same as the manifest says both before and after the restore (a
// touched file is linked, not copied), and the restored file has the
// same size and content. Neither the snapshot's copy nor the restored
// file takes more of the host's disk than the data: the holes are never
// written out as zeros.
func TestSparseFileCostsItsData(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_t")
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 40
	p := filepath.Join(d.Workspace, "huge.bin")
	at := []sparsetest.Piece{{Off: 0, Data: "head"}, {Off: size / 2, Data: "middle"}, {Off: size - 4, Data: "tail"}}
	sparsetest.Make(t, p, size, at...)
	const rel = "workspace/huge.bin"
	sparsetest.Within(t, 2*time.Minute, func() error {
		if _, err := l.TakeSnapshot(ctx, "thr_t", "s1", "", "ctr_t"); err != nil {
			return err
		}
		if n := sparsetest.Allocated(t, filepath.Join(l.SnapshotDir("thr_t", "s1"), rel)); n > 1<<20 {
			return fmt.Errorf("the snapshot's copy of a sparse file of %d bytes takes %d bytes of the host's disk", int64(size), n)
		}
		man, err := l.SnapshotManifest(ctx, "thr_t", "s1")
		if err != nil {
			return err
		}
		now, err := l.ContainerFiles(ctx, "ctr_t", []string{rel})
		if err != nil {
			return err
		}
		if got := man[rel]; got.Size != size || !strings.HasPrefix(got.SHA256, sparsePrefix) || !got.Same(now[rel]) {
			return fmt.Errorf("manifest %+v, the container's file %+v", got, now[rel])
		}
		mt := time.Now().Add(time.Minute)
		if err := os.Chtimes(p, mt, mt); err != nil {
			return err
		}
		st, err := l.TakeSnapshot(ctx, "thr_t", "s2", "s1", "ctr_t")
		if err != nil {
			return err
		}
		if !st.Unchanged || st.Stored != 0 {
			return fmt.Errorf("a touched sparse file is taken as changed: %+v", st)
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		if err := l.RestoreSnapshot(ctx, "thr_t", "s1", "ctr_t"); err != nil {
			return err
		}
		if n := sparsetest.Allocated(t, p); n > 1<<20 {
			return fmt.Errorf("the restored sparse file takes %d bytes", n)
		}
		if now, err = l.ContainerFiles(ctx, "ctr_t", []string{rel}); err != nil {
			return err
		}
		if !man[rel].Same(now[rel]) {
			return fmt.Errorf("restored %+v, the manifest says %+v", now[rel], man[rel])
		}
		return nil
	})
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != size {
		t.Fatalf("restored: %v %v", fi, err)
	}
	for _, pc := range append(at, sparsetest.Piece{Off: size / 4, Data: "\x00\x00"}) {
		b := make([]byte, len(pc.Data))
		if _, err := f.ReadAt(b, pc.Off); err != nil || string(b) != pc.Data {
			t.Errorf("restored at %d: %q, want %q (%v)", pc.Off, b, pc.Data, err)
		}
	}
}

// TestFileDigest: a file without holes is digested as the SHA-256 of its
// content; files with holes by their data, the same for the same content
// whatever the holes (written zeros count as holes do), different for a
// different content or size, and never equal to a plain SHA-256.
func TestFileDigest(t *testing.T) {
	dir := t.TempDir()
	digest := func(name string) string {
		t.Helper()
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sum, _, err := hashFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	const size = 1 << 20
	x, yz := sparsetest.Piece{Off: 5000, Data: "x"}, sparsetest.Piece{Off: 300000, Data: "yz"}
	sparsetest.Make(t, filepath.Join(dir, "a"), size, x, yz)
	sparsetest.Make(t, filepath.Join(dir, "b"), size, sparsetest.Piece{Off: 0, Data: string(make([]byte, 20000))}, x, yz)
	sparsetest.Make(t, filepath.Join(dir, "c"), size, x, sparsetest.Piece{Off: 300000, Data: "yZ"})
	sparsetest.Make(t, filepath.Join(dir, "d"), size+1, x, yz)
	content := make([]byte, size)
	content[5000], content[300000], content[300001] = 'x', 'y', 'z'
	if err := os.WriteFile(filepath.Join(dir, "dense"), content, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b, c, d, dense := digest("a"), digest("b"), digest("c"), digest("d"), digest("dense")
	if !strings.HasPrefix(a, sparsePrefix) || a != b {
		t.Errorf("the same content with other holes: %s, %s", a, b)
	}
	if c == a || d == a {
		t.Errorf("another content or size has the same digest: %s, %s, %s", a, c, d)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256(content)); dense != want {
		t.Errorf("a file without holes: %s, want its SHA-256 %s", dense, want)
	}
}
