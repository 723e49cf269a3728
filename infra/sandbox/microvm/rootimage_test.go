package microvm

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/infra/sandbox/sandboxtest"
)

// The root filesystem's image is made once, beside its folder unless
// configured elsewhere, and kept; "off" and a failed making are answers
// that keep warm VMs on a shared root, remembered rather than tried again.
func TestRootImage(t *testing.T) {
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		sandboxtest.Need(t, "no mkfs.erofs (erofs-utils)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr", "bin", "hello"), []byte("hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	newB := func(setting string) *Backend {
		return &Backend{cfg: Config{RootImage: setting}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), rootfs: rootfs}
	}

	b := newB("")
	img, err := b.rootImage(ctx)
	if err != nil || img != rootfs+".erofs" {
		t.Fatalf("image %q %v, want %s", img, err, rootfs+".erofs")
	}
	head := make([]byte, 1028)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadFull(f, head)
	f.Close()
	// erofs's magic, little-endian, at byte 1024.
	if err != nil || string(head[1024:1028]) != "\xe2\xe1\xf5\xe0" {
		t.Fatalf("%s is not an erofs image (%v)", img, err)
	}
	fi, _ := os.Stat(img)
	if again, err := newB("").rootImage(ctx); err != nil || again != img {
		t.Fatalf("second backend: %q %v", again, err)
	}
	if fi2, _ := os.Stat(img); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Error("the image was made again, not kept")
	}
	if left, _ := filepath.Glob(img + ".tmp-*"); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}

	// Configured elsewhere.
	other := filepath.Join(dir, "images", "root.erofs")
	if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
		t.Fatal(err)
	}
	// Made to the end even when its first caller stops waiting: every
	// warm VM after it needs it.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := newB(other).rootImage(gone); err != nil || got != other {
		t.Fatalf("configured image, its caller gone: %q %v", got, err)
	}

	// Turned off, and a folder where it cannot be written: no image,
	// with the reason, and the answer is kept.
	if got, err := newB("off").rootImage(ctx); err == nil || got != "" || !strings.Contains(err.Error(), "MICROVM_ROOT_IMAGE") {
		t.Fatalf("off: %q %v", got, err)
	}
	bad := newB(filepath.Join(dir, "no", "such", "folder", "root.erofs"))
	if got, err := bad.rootImage(ctx); err == nil || got != "" {
		t.Fatalf("unwritable: %q %v", got, err)
	}
	bad.cfg.RootImage = other
	if got, err := bad.rootImage(ctx); err == nil || got != "" {
		t.Fatalf("a failed image was tried again: %q %v", got, err)
	}
}
