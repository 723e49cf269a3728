package hostdirs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestUsageCountsTheContainersFiles(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	if n, err := l.Usage(ctx, "none"); err != nil || n != 0 {
		t.Fatalf("a container without folders: %d %v", n, err)
	}
	d, err := l.Prepare(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "big")
	files := []struct {
		path string
		size int
	}{
		{filepath.Join(d.Workspace, "a.txt"), 100},
		{filepath.Join(d.Workspace, "deep", "er", "b.bin"), 2000},
		{filepath.Join(d.Uploads, "c.csv"), 30},
		{filepath.Join(d.Outputs, "d.png"), 4},
		{filepath.Join(d.Skills, "pdf", "SKILL.md"), 5000}, // the org's skills: not counted
		{outside, 1 << 20},
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, make([]byte, f.size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(d.Workspace, "link")); err != nil { // not followed
		t.Fatal(err)
	}
	if n, err := l.Usage(ctx, "c1"); err != nil || n != 2134 {
		t.Fatalf("usage %d %v, want 2134", n, err)
	}
	if err := l.Remove(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Usage(ctx, "c1"); err != nil || n != 0 {
		t.Fatalf("usage after remove %d %v", n, err)
	}
}

func TestUsageWithLoopQuota(t *testing.T) {
	if os.Getuid() != 0 || exec.Command("mkfs.ext4", "-V").Run() != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("loop quota needs root and mkfs.ext4")
		}
		t.Skip("loop quota needs root and mkfs.ext4")
	}
	ctx := context.Background()
	l := New(t.TempDir(), Options{Quota: QuotaLoop, DiskBytes: 64 << 20})
	t.Cleanup(func() { _ = l.Remove(context.Background(), "q") })
	d, err := l.Prepare(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Outputs, "fill"), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Usage(ctx, "q"); err != nil || n != 3<<20 {
		t.Fatalf("mounted: usage %d %v, want %d", n, err, 3<<20)
	}
	// Unmounted, the image's allocated blocks stand in: the files and the
	// file system's own blocks, far below the image's 64 MiB size.
	if err := l.Release(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Usage(ctx, "q"); err != nil || n < 3<<20 || n > 16<<20 {
		t.Fatalf("unmounted: usage %d %v, want 3 to 16 MiB", n, err)
	}
}
