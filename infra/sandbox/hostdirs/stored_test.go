package hostdirs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/snapshot"
	"threadbox/infra/dirwalk/dirwalktest"
	"threadbox/infra/sparse/sparsetest"
)

// TestSparseFileCountsItsData: a container holding a file of 1 TiB with
// three small writes (truncate -s 1T, at no cost to its disk quota) and
// one ordinary file counts the sparse file's data, not its size, wherever
// bytes are summed for a quota: the snapshot's size and what it stores,
// which a retention of 1 MiB per thread keeps; the next snapshot that
// links it; the container's usage; and a folder's TreeBytes (a turn's
// running state). The manifest still gives the file's size.
func TestSparseFileCountsItsData(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_s")
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 40
	at := []sparsetest.Piece{{Off: 0, Data: "head"}, {Off: size / 2, Data: "middle"}, {Off: size - 4, Data: "tail"}}
	p := filepath.Join(d.Workspace, "huge.bin")
	sparsetest.Make(t, p, size, at...)
	writeUnder(t, d.Root, "workspace/notes.txt", "some notes")
	// The data lies in blocks of the file system: at least the bytes
	// written, far below 1 MiB.
	low, high := int64(len("headmiddletail")+len("some notes")), int64(1<<20)
	within := func(what string, n int64) error {
		if n < low || n > high {
			return fmt.Errorf("%s: %d bytes, want the data's %d to %d", what, n, low, high)
		}
		return nil
	}
	sparsetest.Within(t, 2*time.Minute, func() error {
		s1, err := l.TakeSnapshot(ctx, "thr_s", "s1", "", "ctr_s")
		if err != nil {
			return err
		}
		if err := within("the snapshot's size", s1.Size); err != nil {
			return err
		}
		if s1.Stored != s1.Size || s1.Files != 2 {
			return fmt.Errorf("the first snapshot stores %d of its %d bytes, %d files", s1.Stored, s1.Size, s1.Files)
		}
		sn := snapshot.Snapshot{ID: "s1", Size: s1.Size, Bytes: s1.Stored}
		if _, keep := (snapshot.Retention{Bytes: high}).Prune([]snapshot.Snapshot{sn}); len(keep) != 1 {
			return fmt.Errorf("a retention of %d bytes per thread drops a snapshot storing %d", high, s1.Stored)
		}
		man, err := l.SnapshotManifest(ctx, "thr_s", "s1")
		if err != nil {
			return err
		}
		if got := man["workspace/huge.bin"].Size; got != size {
			return fmt.Errorf("the manifest gives the file %d bytes, want its size %d", got, int64(size))
		}
		mt := time.Now().Add(time.Minute)
		if err := os.Chtimes(p, mt, mt); err != nil {
			return err
		}
		s2, err := l.TakeSnapshot(ctx, "thr_s", "s2", "s1", "ctr_s")
		if err != nil {
			return err
		}
		if s2.Size != s1.Size || s2.Stored != 0 {
			return fmt.Errorf("the snapshot linking the files: %+v, want the size %d and nothing stored", s2, s1.Size)
		}
		used, err := l.Usage(ctx, "ctr_s")
		if err != nil {
			return err
		}
		if err := within("the container's usage", used); err != nil {
			return err
		}
		return within("TreeBytes", TreeBytes(d.Workspace))
	})
}

// TestTreeBytesNeverWalksThroughALink: a folder that code swaps for a
// symbolic link to a host folder, back and forth, while its tree is
// measured never makes TreeBytes count the host folder's file; and a
// folder swapped for a link just before the walk opens it is left out.
// (A walk by path counts the host file within a few hundred measures.)
func TestTreeBytesNeverWalksThroughALink(t *testing.T) {
	dir := t.TempDir()
	neverMeasuresThroughALink(t, dir, "sub", func() (int64, error) { return TreeBytes(dir), nil })
}

// TestUsageNeverWalksThroughALink: as TreeBytes, a container's usage
// (which its org's storage quota sums) never counts a host folder's file
// through a folder of its workspace swapped for a link.
func TestUsageNeverWalksThroughALink(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_swap")
	if err != nil {
		t.Fatal(err)
	}
	neverMeasuresThroughALink(t, d.Workspace, "workspace/sub", func() (int64, error) { return l.Usage(ctx, "ctr_swap") })
}

// neverMeasuresThroughALink fills dir with a folder sub holding a file of
// 5 bytes and races a swapper of sub for a link to a host folder holding
// 1 MiB against measure, then swaps sub just before the walk opens it
// (treeWalker.BeforeDescend at rel): measure never counts the host file.
func neverMeasuresThroughALink(t *testing.T, dir, rel string, measure func() (int64, error)) {
	t.Helper()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "host-file"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "notes"), []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files listed before the folder keep the walk a while between listing
	// the folder and going into it.
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("a%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("swap race", func(t *testing.T) {
		var stop atomic.Bool
		var swaps atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			stash, link := filepath.Join(dir, ".stash"), filepath.Join(dir, ".link")
			for !stop.Load() {
				_ = os.Symlink(outside, link)
				if os.Rename(sub, stash) == nil {
					_ = os.Rename(link, sub)
					swaps.Add(1)
					_ = os.Remove(sub)
					_ = os.Rename(stash, sub)
				}
			}
		}()
		defer func() { stop.Store(true); wg.Wait() }()
		for i := 0; i < 3000 || swaps.Load() == 0; i++ {
			n, err := measure()
			if err != nil {
				t.Fatalf("measure %d: %v", i, err)
			}
			if n >= 1<<20 {
				t.Fatalf("measure %d counted %d bytes: the host folder's file, through the link", i, n)
			}
		}
	})
	t.Run("swapped before it is opened", func(t *testing.T) {
		swapped := dirwalktest.SwapAt(t, &treeWalker, rel, sub, outside)
		n, err := measure()
		if err != nil {
			t.Fatal(err)
		}
		if !swapped() {
			t.Fatal("the walk never reached the folder")
		}
		if n != 0 {
			t.Errorf("counted %d bytes through the link", n)
		}
	})
}

// TestRestoreGrowthCountsData: what a restore adds to a container's files
// counts a sparse file of 1 TiB by its data, as the container's usage
// does: restoring a whole snapshot adds exactly what the usage grows by,
// and restoring paths adds each snapshot file's data less what the
// container's file there stores (a link counting nothing).
func TestRestoreGrowthCountsData(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	d, err := l.Prepare(ctx, "ctr_g")
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 40
	huge := filepath.Join(d.Workspace, "huge.bin")
	sparsetest.Make(t, huge, size, sparsetest.Piece{Off: 0, Data: "head"}, sparsetest.Piece{Off: size - 4, Data: "tail"})
	writeUnder(t, d.Root, "workspace/notes.txt", "some notes")
	if _, err := l.TakeSnapshot(ctx, "thr_g", "s1", "", "ctr_g"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(huge); err != nil {
		t.Fatal(err)
	}
	writeUnder(t, d.Root, "workspace/big.txt", string(make([]byte, 8192)))
	if err := os.Symlink("notes.txt", filepath.Join(d.Workspace, "link")); err != nil {
		t.Fatal(err)
	}
	data, err := l.RestoreGrowth(ctx, "thr_g", "s1", "ctr_g", []string{"workspace/huge.bin"})
	if err != nil {
		t.Fatal(err)
	}
	if data < int64(len("headtail")) || data > 1<<20 {
		t.Fatalf("restoring the sparse file adds %d bytes, want its data's, far below 1 MiB", data)
	}
	for _, tc := range []struct {
		paths []string
		want  int64
	}{
		{[]string{"workspace/big.txt"}, -8192},            // removed: not in the snapshot
		{[]string{"workspace/notes.txt"}, 0},              // the same size
		{[]string{"workspace/link", "workspace/gone"}, 0}, // a link, and nothing at all
		{[]string{"workspace/huge.bin", "workspace/big.txt"}, data - 8192},
	} {
		got, err := l.RestoreGrowth(ctx, "thr_g", "s1", "ctr_g", tc.paths)
		if err != nil || got != tc.want {
			t.Errorf("RestoreGrowth(%v) = %d, %v; want %d", tc.paths, got, err, tc.want)
		}
	}
	whole, err := l.RestoreGrowth(ctx, "thr_g", "s1", "ctr_g", nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := l.Usage(ctx, "ctr_g")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RestoreSnapshot(ctx, "thr_g", "s1", "ctr_g"); err != nil {
		t.Fatal(err)
	}
	after, err := l.Usage(ctx, "ctr_g")
	if err != nil {
		t.Fatal(err)
	}
	if whole != after-before {
		t.Fatalf("restoring the snapshot was to add %d bytes; the usage went from %d to %d", whole, before, after)
	}
}
