package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The disk-full fault: threadbox's DATA_DIR lives on a small ext4
// filesystem of its own (an image file, loop-mounted), and the fault fills
// it to within about diskFullLeft bytes for diskFullHold, then frees it.

const (
	diskFullLeft = 256 << 10
	diskFullHold = 10 * time.Second
)

// dataFS is the loop-mounted filesystem DATA_DIR lives on.
type dataFS struct {
	image, mount string
}

// newDataFS makes an ext4 filesystem of size bytes in an image under work
// and mounts it at work/fs (no blocks reserved for root: the server runs
// as root, and the fault must reach it too).
func newDataFS(ctx context.Context, work string, size int64) (*dataFS, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the disk-full fault needs root (it mounts a filesystem)")
	}
	fs := &dataFS{image: filepath.Join(work, "data.img"), mount: filepath.Join(work, "fs")}
	f, err := os.Create(fs.image)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(size) // sparse
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("data image: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", fs.image).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkfs.ext4: %w: %s", err, out)
	}
	if err := os.MkdirAll(fs.mount, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop", fs.image, fs.mount).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mount the data image: %w: %s", err, out)
	}
	return fs, nil
}

// close unmounts the filesystem (its loop device goes with it).
func (fs *dataFS) close() error {
	_ = os.RemoveAll(fs.filler())
	var last error
	for i := 0; i < 10; i++ {
		out, err := exec.Command("umount", fs.mount).CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("umount %s: %w: %s", fs.mount, err, strings.TrimSpace(string(out)))
		time.Sleep(500 * time.Millisecond)
	}
	_ = exec.Command("umount", "-l", fs.mount).Run()
	return last
}

func (fs *dataFS) filler() string { return filepath.Join(fs.mount, "soak-filler") }

// fill takes the filesystem's free space down to about diskFullLeft
// bytes and returns how much it took: one large file, then smaller ones
// until the filesystem refuses (ext4 needs blocks of its own for each).
func (fs *dataFS) fill() (int64, error) {
	if err := os.MkdirAll(fs.filler(), 0o700); err != nil {
		return 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(fs.mount, &st); err != nil {
		return 0, fmt.Errorf("statfs: %w", err)
	}
	var taken int64
	take := func(n int64) bool {
		f, err := os.Create(filepath.Join(fs.filler(), fmt.Sprintf("f%d", taken)))
		if err != nil {
			return false
		}
		defer f.Close()
		if unix.Fallocate(int(f.Fd()), 0, 0, n) != nil {
			return false
		}
		taken += n
		return true
	}
	if big := int64(st.Bfree)*st.Bsize - 32<<20; big > 0 && !take(big) {
		return taken, fmt.Errorf("fallocate %d bytes: refused", big)
	}
	for _, step := range []int64{1 << 20, 64 << 10} {
		for {
			if err := unix.Statfs(fs.mount, &st); err != nil || int64(st.Bfree)*st.Bsize < diskFullLeft+step {
				break
			}
			if !take(step) {
				break
			}
		}
	}
	return taken, nil
}

// free gives the space back.
func (fs *dataFS) free() error { return os.RemoveAll(fs.filler()) }

// diskFull fills DATA_DIR's filesystem for diskFullHold.
func (s *soak) diskFull(ctx context.Context) (string, error) {
	if s.fs == nil {
		return "", errors.New("DATA_DIR is not on a filesystem of the soak's (-data-fs)")
	}
	n, err := s.fs.fill()
	if err != nil {
		_ = s.fs.free()
		return "", err
	}
	select {
	case <-ctx.Done():
	case <-time.After(diskFullHold):
	}
	if err := s.fs.free(); err != nil {
		return "", err
	}
	return fmt.Sprintf(" (%d MiB taken, %v)", n>>20, diskFullHold), nil
}
