package fsroot

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"threadbox/domain/file"
	"threadbox/infra/sandbox/hostdirs"
)

// mountFS mounts what args name (after "mount") on a new folder under dir
// and unmounts it when the test ends.
func mountFS(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	at := filepath.Join(dir, name)
	if err := os.Mkdir(at, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", append(args, at)...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
	t.Cleanup(func() {
		// A loop device unmounted from a file in it lets go of that file
		// a moment later: busy until then.
		var out []byte
		var err error
		for try := 0; try < 50; try++ {
			if out, err = exec.Command("umount", at).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("umount %s: %v: %s", at, err, out)
	})
	return at
}

// containerFS returns an FS over container folders made under root.
func containerFS(t *testing.T, root string, opts Options) *FS {
	t.Helper()
	d := Dirs{Workspace: filepath.Join(root, "workspace"), Uploads: filepath.Join(root, "uploads"),
		Outputs: filepath.Join(root, "outputs"), Skills: filepath.Join(root, "skills")}
	for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return New(d, opts)
}

// TestWhoseDiskIsFull: a write that finds no room says whose disk is full
// — the container's own (its quota file system is full), or the server's
// (the container's quota file system has room, but the disk its sparse
// image lives on has none; or the folders share the server's disk) — and
// leaves nothing behind.
func TestWhoseDiskIsFull(t *testing.T) {
	if os.Geteuid() != 0 {
		need(t, "mounting test file systems needs root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		need(t, "mkfs.ext4 missing: %v", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	big := bytes.Repeat([]byte("x"), 3<<20)

	// The container's own quota file system is full.
	small := mountFS(t, dir, "quota", "-t", "tmpfs", "-o", "size=2m", "tmpfs")
	fs := containerFS(t, small, Options{})
	if _, err := fs.Write(ctx, file.Uploads, "big.bin", bytes.NewReader(big), -1); !errors.Is(err, file.ErrDiskFull) || !errors.Is(err, file.ErrTooLarge) || errors.Is(err, file.ErrServerDiskFull) {
		t.Fatalf("quota full: %v, want the container's disk full", err)
	}
	// The same, with folders on the server's disk: the server's.
	fs = containerFS(t, small, Options{SharedDisk: true})
	if _, err := fs.Write(ctx, file.Uploads, "big.bin", bytes.NewReader(big), -1); !errors.Is(err, file.ErrServerDiskFull) {
		t.Fatalf("shared disk full: %v, want the server's disk full", err)
	}

	// A sparse quota image with room on a full disk: the server's.
	outer := mountFS(t, dir, "outer", "-t", "tmpfs", "-o", "size=24m", "tmpfs")
	img := filepath.Join(outer, "c.img")
	if out, err := exec.Command("truncate", "-s", "64M", img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := hostdirs.MountLoop(ctx, img, inner, "nosuid,nodev"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", inner).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", inner, err, out)
		}
	})
	fs = containerFS(t, inner, Options{})
	// Fill the disk under the image.
	fill, err := os.Create(filepath.Join(outer, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fill.Write(make([]byte, 1<<20)); err != nil {
			break
		}
	}
	fill.Close()
	_, err = fs.Write(ctx, file.Uploads, "up.bin", bytes.NewReader(bytes.Repeat([]byte("y"), 8<<20)), -1)
	if !errors.Is(err, file.ErrServerDiskFull) {
		t.Fatalf("the disk under a quota image full: %v, want the server's disk full", err)
	}
	if list, _ := fs.List(ctx, file.Uploads, "."); len(list) != 0 {
		t.Fatalf("a failed write left %+v", list)
	}
	if err := os.Remove(filepath.Join(outer, "fill")); err != nil {
		t.Fatal(err)
	}
}

// need fails the test under CI=true and skips it otherwise.
func need(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
