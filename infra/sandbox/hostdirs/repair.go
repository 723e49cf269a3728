package hostdirs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"

	"threadbox/domain/file"
)

// repairHeadroom is the room Repair leaves free on the host disk beyond
// the image's holes, so that a repair never takes the disk's last blocks.
const repairHeadroom = 8 << 20

// Repair brings back a container's quota file system that went read-only
// (Prepare's sandbox.ErrFoldersReadOnly; its image met I/O errors when the
// disk under it filled): it unmounts it, checks and repairs the image
// (e2fsck, which replays the journal) and mounts it again. Its sandbox must
// be stopped first: it would keep the read-only view. Without quotas it
// does nothing.
//
// e2fsck must never meet a full disk: a write it cannot make into a hole of
// the sparse image is "ignored" under -y, and it then clears the journal
// whose transactions it failed to replay — acknowledged writes are lost. So
// the image's every block is allocated first (its holes become unwritten
// extents); while the host disk has no room for that, Repair fails with
// file.ErrServerDiskFull and leaves the image as it is. The holes are dug
// again afterwards.
func (l *Layout) Repair(ctx context.Context, id string) error {
	if l.opts.Quota != QuotaLoop {
		return nil
	}
	defer l.lock(id)()
	root := l.Dirs(id).Root
	if err := l.unmount(ctx, root); err != nil {
		return err
	}
	img := l.DiskImage(id)
	if err := reserve(img); err != nil {
		return fmt.Errorf("hostdirs: repair %s: %w", id, err)
	}
	// e2fsck: 0 clean, 1 errors corrected, 2 corrected and a reboot
	// advised (for a root file system); 4 and up left uncorrected.
	out, err := exec.CommandContext(ctx, "e2fsck", "-f", "-y", img).CombinedOutput()
	// Give back what e2fsck left unwritten, whatever it answered.
	if f, err := os.OpenFile(img, os.O_RDWR, 0); err == nil {
		_ = punchHoles(f)
		f.Close()
	}
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() >= 4) {
		return fmt.Errorf("hostdirs: repair %s: e2fsck: %w: %s", id, err, bytes.TrimSpace(out))
	}
	if err := l.mountQuota(ctx, id, root); err != nil {
		return fmt.Errorf("hostdirs: repair %s: %w", id, err)
	}
	return nil
}

// reserve allocates every block of the image at img, or fails with
// file.ErrServerDiskFull, allocating nothing, when the disk under it lacks
// the room (with repairHeadroom to spare).
func reserve(img string) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("quota image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("quota image: %w", err)
	}
	holes := fi.Size() - allocated(fi)
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("quota image: %w", err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < holes+repairHeadroom {
		return fmt.Errorf("quota image needs %d bytes, %d free: %w", holes+repairHeadroom, free, file.ErrServerDiskFull)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, fi.Size()); err != nil {
		// What it allocated before it failed goes back.
		_ = punchHoles(f)
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("allocate the quota image: %w", file.ErrServerDiskFull)
		}
		return fmt.Errorf("allocate the quota image: %w", err)
	}
	return nil
}

// punchHoles frees the blocks of f's holes: ranges allocated but never
// written (unwritten extents, which SEEK_HOLE reports as holes) go back to
// the disk; written blocks are kept, zero or not.
func punchHoles(f *os.File) error {
	fd := int(f.Fd())
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	for off := int64(0); off < size; {
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil || hole >= size {
			return err
		}
		data, err := unix.Seek(fd, hole, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // a hole to the end
			data = size
		} else if err != nil {
			return err
		}
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, hole, data-hole); err != nil {
			return err
		}
		off = data
	}
	return nil
}
