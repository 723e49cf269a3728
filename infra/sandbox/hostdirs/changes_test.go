package hostdirs

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/snapshot"
)

// TestCallChangesAndRestorePaths: the manifests of two snapshots tell what
// changed between them, a snapshot of unchanged folders says so, the
// container's files are read as a snapshot hashes them, and restoring
// some paths from the earlier snapshot puts back exactly those: a deleted
// file comes back, a created one goes, a changed one is as it was, and
// the others stay as they are.
func TestCallChangesAndRestorePaths(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_c")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel, content string) { t.Helper(); writeUnder(t, d.Root, rel, content) }
	write("workspace/a.txt", "one\n")
	write("workspace/d/gone.txt", "bye\n")
	write("outputs/keep.txt", "keep\n")
	if _, err := l.TakeSnapshot(ctx, "thr_c", "s1", "", "ctr_c"); err != nil {
		t.Fatal(err)
	}
	st, err := l.TakeSnapshot(ctx, "thr_c", "s1b", "s1", "ctr_c")
	if err != nil || !st.Unchanged {
		t.Fatalf("unchanged folders: %+v %v", st, err)
	}
	// The call: one file changed, one deleted with its folder, one made.
	write("workspace/a.txt", "two\n")
	if err := os.RemoveAll(filepath.Join(d.Root, "workspace/d")); err != nil {
		t.Fatal(err)
	}
	write("workspace/new/n.txt", "new\n")
	st, err = l.TakeSnapshot(ctx, "thr_c", "s2", "s1", "ctr_c")
	if err != nil || st.Unchanged {
		t.Fatalf("changed folders: %+v %v", st, err)
	}
	before, err := l.SnapshotManifest(ctx, "thr_c", "s1")
	if err != nil {
		t.Fatal(err)
	}
	after, err := l.SnapshotManifest(ctx, "thr_c", "s2")
	if err != nil {
		t.Fatal(err)
	}
	var got, paths []string
	for _, c := range snapshot.Diff(before, after) {
		got = append(got, c.Op+" "+c.Path)
		paths = append(paths, c.Path)
	}
	if want := []string{"changed workspace/a.txt", "deleted workspace/d/gone.txt", "created workspace/new/n.txt"}; !slices.Equal(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	if b, more, err := l.SnapshotFile(ctx, "thr_c", "s1", "workspace/d/gone.txt", 2); err != nil || string(b) != "by" || !more {
		t.Fatalf("snapshot file: %q %v %v", b, more, err)
	}
	if _, _, err := l.SnapshotFile(ctx, "thr_c", "s1", "workspace/../../x", 10); err == nil {
		t.Fatal("a path out of the snapshot was read")
	}
	now, err := l.ContainerFiles(ctx, "ctr_c", append(paths, "outputs/keep.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(now) != 3 || !now["workspace/a.txt"].Same(after["workspace/a.txt"]) || !now["outputs/keep.txt"].Same(before["outputs/keep.txt"]) {
		t.Fatalf("container files %v", now)
	}
	// Another file changed later stays as it is.
	write("outputs/keep.txt", "later\n")
	if err := l.RestorePaths(ctx, "thr_c", "s1", "ctr_c", paths); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"workspace/a.txt": "one\n", "workspace/d/gone.txt": "bye\n", "outputs/keep.txt": "later\n"}
	if got := tree(t, d); !maps.Equal(got, want) {
		t.Fatalf("after restore %v, want %v", got, want)
	}
	// The folder made for the created file goes with it.
	if _, err := os.Lstat(filepath.Join(d.Root, "workspace/new")); !os.IsNotExist(err) {
		t.Fatalf("the folder the call made is still there: %v", err)
	}
	// A link the sandbox put where a folder was is replaced, not followed.
	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(d.Root, "workspace/d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(d.Root, "workspace/d")); err != nil {
		t.Fatal(err)
	}
	if err := l.RestorePaths(ctx, "thr_c", "s1", "ctr_c", []string{"workspace/d/gone.txt"}); err == nil {
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Fatalf("restore wrote through a link: %v", ents)
		}
	}
	// The empty snapshot removes.
	if err := l.RestorePaths(ctx, "thr_c", "", "ctr_c", []string{"workspace/a.txt"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(d.Root, "workspace/a.txt")); !os.IsNotExist(err) {
		t.Fatalf("a.txt still there: %v", err)
	}
}

// TestRestorePathsReplacesInPlace: restoring a file puts the snapshot's
// copy over the one there, so a reader in the sandbox never finds the
// path missing; a folder where the snapshot has a file is replaced; and a
// restore that fails leaves the file as it was, with no stray entry.
func TestRestorePathsReplacesInPlace(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_r")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel, content string) { t.Helper(); writeUnder(t, d.Root, rel, content) }
	write("workspace/a.txt", "one\n")
	write("workspace/b.txt", "bee\n")
	if _, err := l.TakeSnapshot(ctx, "thr_r", "s1", "", "ctr_r"); err != nil {
		t.Fatal(err)
	}
	write("workspace/a.txt", "two\n")
	if _, err := l.TakeSnapshot(ctx, "thr_r", "s2", "s1", "ctr_r"); err != nil {
		t.Fatal(err)
	}

	a := filepath.Join(d.Root, "workspace/a.txt")
	stop := make(chan struct{})
	missing := make(chan error, 1)
	go func() {
		defer close(missing)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := os.ReadFile(a); err != nil {
				missing <- err
				return
			}
		}
	}()
	for i := range 200 {
		snap := []string{"s1", "s2"}[i%2]
		if err := l.RestorePaths(ctx, "thr_r", snap, "ctr_r", []string{"workspace/a.txt"}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-missing; err != nil {
		t.Fatalf("a reader found the file missing while it was restored: %v", err)
	}
	if got, _ := os.ReadFile(a); string(got) != "two\n" {
		t.Fatalf("after the restores a.txt is %q, want the last snapshot's", got)
	}

	// A folder the sandbox put where the snapshot has a file.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	write("workspace/a.txt/inside", "x\n")
	if err := l.RestorePaths(ctx, "thr_r", "s1", "ctr_r", []string{"workspace/a.txt"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(a); string(got) != "one\n" {
		t.Fatalf("the folder was not replaced by the file: %q", got)
	}

	// A snapshot copy that cannot be read: the file stays as it is.
	write("workspace/b.txt", "changed\n")
	stored := filepath.Join(l.SnapshotDir("thr_r", "s2"), "workspace", "b.txt")
	if err := os.Remove(stored); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stored, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := l.RestorePaths(ctx, "thr_r", "s2", "ctr_r", []string{"workspace/b.txt"}); err == nil {
		t.Fatal("a restore from an unreadable copy succeeded")
	}
	if got, _ := os.ReadFile(filepath.Join(d.Root, "workspace/b.txt")); string(got) != "changed\n" {
		t.Fatalf("a failed restore left b.txt %q, want it as it was", got)
	}
	ents, err := os.ReadDir(filepath.Join(d.Root, "workspace"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("a stray entry is left: %s", e.Name())
		}
	}
}

// TestRestorePathsUnderTheQuota: a file restored where its old copy and
// the snapshot's do not fit side by side under the container's disk quota
// is restored all the same, by removing the old one first.
func TestRestorePathsUnderTheQuota(t *testing.T) {
	needLoopQuota(t)
	ctx := context.Background()
	l := New(t.TempDir(), Options{Quota: QuotaLoop, DiskBytes: 32 << 20})
	t.Cleanup(func() { _ = l.Remove(context.Background(), "ctr_q") })
	d, err := l.Prepare(ctx, "ctr_q")
	if err != nil {
		t.Fatal(err)
	}
	big := func(b byte) string { return strings.Repeat(string(b), 20<<20) }
	writeUnder(t, d.Root, "workspace/big.bin", big('a'))
	if _, err := l.TakeSnapshot(ctx, "thr_q", "s1", "", "ctr_q"); err != nil {
		t.Fatal(err)
	}
	writeUnder(t, d.Root, "workspace/big.bin", big('b'))
	if err := l.RestorePaths(ctx, "thr_q", "s1", "ctr_q", []string{"workspace/big.bin"}); err != nil {
		t.Fatalf("restore of a file that fits only once: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(d.Root, "workspace/big.bin"))
	if err != nil || string(got) != big('a') {
		t.Fatalf("big.bin after the restore: %d bytes, %v; want the snapshot's 20 MiB", len(got), err)
	}
	ents, err := os.ReadDir(filepath.Join(d.Root, "workspace"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("workspace holds %d entries after the restore, want big.bin alone", len(ents))
	}
}

// TestContainerFilesReadsOnlyARegularFile: a file the sandbox swaps for a
// FIFO between the check of its path and its open, a FIFO whose writer
// never writes, is left out as a FIFO found at the path is: reading it
// would wait for data, under the container's lock, for as long as the
// sandbox likes.
func TestContainerFilesReadsOnlyARegularFile(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_f")
	if err != nil {
		t.Fatal(err)
	}
	writeUnder(t, d.Root, "workspace/a.txt", "one\n")
	a := filepath.Join(d.Root, "workspace/a.txt")
	writer := make(chan int, 1)
	l.opts.opening = func(string) {
		if err := os.Remove(a); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Mkfifo(a, 0o644); err != nil {
			t.Error(err)
			return
		}
		// Open for reading and writing, it holds the FIFO's write end.
		w, err := unix.Open(a, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		writer <- w
	}
	type result struct {
		files map[string]snapshot.File
		err   error
	}
	done := make(chan result, 1)
	go func() {
		files, err := l.ContainerFiles(ctx, "ctr_f", []string{"workspace/a.txt"})
		done <- result{files, err}
	}()
	// Closing the write end ends a read of the FIFO: it then reads as
	// empty.
	closeWriter := func() {
		select {
		case w := <-writer:
			unix.Close(w)
		default:
		}
	}
	select {
	case r := <-done:
		closeWriter()
		if r.err != nil {
			t.Fatal(r.err)
		}
		if f, ok := r.files["workspace/a.txt"]; ok {
			t.Fatalf("the FIFO was hashed as a file: %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Error("ContainerFiles is still reading the FIFO put in place of the file")
		closeWriter()
		<-done
	}
}

// TestContainerFilesStopsWithItsContext: a context that ends while a file
// is hashed ends the hash, as it would end the read of a sparse file of
// terabytes, all zeros.
func TestContainerFilesStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_x")
	if err != nil {
		t.Fatal(err)
	}
	writeUnder(t, d.Root, "workspace/a.txt", "one\n")
	l.opts.opening = func(string) { cancel() }
	files, err := l.ContainerFiles(ctx, "ctr_x", []string{"workspace/a.txt"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, %v; want the context's end", files, err)
	}
}
