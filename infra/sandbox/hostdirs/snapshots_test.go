package hostdirs

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// tree returns the files and links under a container's folders: path to
// content (a link's as "-> target").
func tree(t testing.TB, d Dirs) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range snapshotFolders {
		root := filepath.Join(d.Root, name)
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(d.Root, p)
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				out[rel] = "-> " + target
			case e.Type().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				out[rel] = string(b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSnapshotTakeAndRestore: each snapshot holds the folders as they
// were, shares the files unchanged since the one before, and restores
// exactly them: later files removed, deleted ones back, links kept as
// links.
func TestSnapshotTakeAndRestore(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_a")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel, content string) { t.Helper(); writeUnder(t, d.Root, rel, content) }
	write("workspace/keep.txt", "kept")
	write("workspace/dir/a.txt", "one")
	write("outputs/report.csv", "x,y")
	if err := os.Symlink("/etc/passwd", filepath.Join(d.Workspace, "link")); err != nil {
		t.Fatal(err)
	}
	first := tree(t, d)
	s1, err := l.TakeSnapshot(ctx, "thr_a", "snp_1", "", "ctr_a")
	if err != nil {
		t.Fatal(err)
	}
	if s1.Files != 3 || s1.Size != int64(len("kept")+len("one")+len("x,y")) || s1.Stored != s1.Size {
		t.Fatalf("first snapshot %+v", s1)
	}

	write("workspace/dir/a.txt", "two!")
	write("workspace/new.txt", "new")
	if err := os.Remove(filepath.Join(d.Outputs, "report.csv")); err != nil {
		t.Fatal(err)
	}
	second := tree(t, d)
	s2, err := l.TakeSnapshot(ctx, "thr_a", "snp_2", "snp_1", "ctr_a")
	if err != nil {
		t.Fatal(err)
	}
	if s2.Files != 3 || s2.Stored != int64(len("two!")+len("new")) {
		t.Fatalf("second snapshot %+v, want only the changed files stored", s2)
	}
	a, _ := os.Stat(filepath.Join(l.SnapshotDir("thr_a", "snp_1"), "workspace/keep.txt"))
	b, _ := os.Stat(filepath.Join(l.SnapshotDir("thr_a", "snp_2"), "workspace/keep.txt"))
	if !os.SameFile(a, b) {
		t.Fatal("an unchanged file is not shared with the snapshot before")
	}

	write("workspace/later.txt", "later")
	for _, tc := range []struct {
		id   string
		want map[string]string
	}{{"snp_1", first}, {"snp_2", second}, {"snp_1", first}} {
		if err := l.RestoreSnapshot(ctx, "thr_a", tc.id, "ctr_a"); err != nil {
			t.Fatal(err)
		}
		if got := tree(t, d); !maps.Equal(got, tc.want) {
			t.Fatalf("after restoring %s: %v, want %v", tc.id, got, tc.want)
		}
	}
	// Dropping the first leaves the second whole.
	if err := l.DropSnapshot(ctx, "thr_a", "snp_1"); err != nil {
		t.Fatal(err)
	}
	if err := l.RestoreSnapshot(ctx, "thr_a", "snp_2", "ctr_a"); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, d); !maps.Equal(got, second) {
		t.Fatalf("after dropping the first: %v, want %v", got, second)
	}
	if err := l.DropSnapshots(ctx, "thr_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.snapshots, "thr_a")); !os.IsNotExist(err) {
		t.Fatalf("snapshots left after DropSnapshots: %v", err)
	}
}

// BenchmarkSnapshotTurn measures a turn's snapshot of a 100 MiB workspace
// (100 files of 1 MiB) of which one file changed since the snapshot
// before, and the restore of one.
func BenchmarkSnapshotTurn(b *testing.B) {
	ctx := context.Background()
	l := New(b.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_b")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range 100 {
		_, _ = rand.Read(buf)
		if err := os.WriteFile(filepath.Join(d.Workspace, fmt.Sprintf("f%03d.bin", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	prev := "snp_0"
	if _, err := l.TakeSnapshot(ctx, "thr_b", prev, "", "ctr_b"); err != nil {
		b.Fatal(err)
	}
	var stored int64
	b.Run("take", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			_, _ = rand.Read(buf)
			if err := os.WriteFile(filepath.Join(d.Workspace, "f000.bin"), buf, 0o644); err != nil {
				b.Fatal(err)
			}
			// The mtime must move past the one recorded.
			now := time.Now().Add(time.Duration(i+1) * time.Second)
			_ = os.Chtimes(filepath.Join(d.Workspace, "f000.bin"), now, now)
			id := fmt.Sprintf("snp_%d", i+1)
			b.StartTimer()
			st, err := l.TakeSnapshot(ctx, "thr_b", id, prev, "ctr_b")
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			stored = st.Stored
			_ = l.DropSnapshot(ctx, "thr_b", prev)
			prev = id
		}
		b.ReportMetric(float64(stored), "stored-bytes/op")
	})
	b.Run("restore", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := l.RestoreSnapshot(ctx, "thr_b", prev, "ctr_b"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// writeUnder writes content to the file rel under root, making its folders.
func writeUnder(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
