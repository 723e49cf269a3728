package hostdirs

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// piece is data written at an offset of a file.
type piece struct {
	off  int64
	data string
}

// makeSparse makes the file p of size bytes holding the pieces, written
// in order, and nothing else written; the test skips where the file
// system does not keep it sparse.
func makeSparse(t *testing.T, p string, size int64, pieces ...piece) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Skipf("this file system holds no file of %d bytes: %v", size, err)
	}
	for _, pc := range pieces {
		if _, err := f.WriteAt([]byte(pc.data), pc.off); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 1<<20 {
		t.Skip("this file system does not keep sparse files")
	}
}

// within runs fn, failing the test when it has not returned after d: a
// bound that only tells a hang, far above what fn takes.
func within(t *testing.T, d time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("not done after %v", d)
	}
}

// TestSparseFileCostsItsData: a file of 1 TiB with three small writes
// (code in a sandbox makes one with truncate, at no cost to its disk
// quota) is snapshotted, read as the container's file, snapshotted again
// once touched, and restored, each reading its data and never its holes:
// the snapshot's digest marks it as sparse, the container's file reads
// the same as the manifest says both before and after the restore (a
// touched file is linked, not copied), and the restored file has the
// same size and content.
func TestSparseFileCostsItsData(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_t")
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 40
	p := filepath.Join(d.Workspace, "huge.bin")
	at := []piece{{0, "head"}, {size / 2, "middle"}, {size - 4, "tail"}}
	makeSparse(t, p, size, at...)
	const rel = "workspace/huge.bin"
	within(t, 2*time.Minute, func() error {
		if _, err := l.TakeSnapshot(ctx, "thr_t", "s1", "", "ctr_t"); err != nil {
			return err
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
	for _, pc := range append(at, piece{size / 4, "\x00\x00"}) {
		b := make([]byte, len(pc.data))
		if _, err := f.ReadAt(b, pc.off); err != nil || string(b) != pc.data {
			t.Errorf("restored at %d: %q, want %q (%v)", pc.off, b, pc.data, err)
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
	x, yz := piece{5000, "x"}, piece{300000, "yz"}
	makeSparse(t, filepath.Join(dir, "a"), size, x, yz)
	makeSparse(t, filepath.Join(dir, "b"), size, piece{0, string(make([]byte, 20000))}, x, yz)
	makeSparse(t, filepath.Join(dir, "c"), size, x, piece{300000, "yZ"})
	makeSparse(t, filepath.Join(dir, "d"), size+1, x, yz)
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
