package hostdirs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"threadbox/infra/sparse"
)

// Usage returns the bytes a container's files use: what the regular files
// in its workspace, uploads and outputs folders store (storedBytes: a
// sparse file counts its data, not its size; its skills folder holds
// copies of the org's skills and is not counted). Links are not
// followed. With loop quotas a container whose disk is not mounted (no
// Prepare since the server started) is measured by its image's allocated
// blocks instead, which also counts the file system's own few megabytes. A
// container without folders uses nothing.
func (l *Layout) Usage(ctx context.Context, id string) (int64, error) {
	d := l.Dirs(id)
	if l.opts.Quota == QuotaLoop {
		mounted, err := isMountPoint(d.Root)
		if err != nil {
			return 0, err
		}
		if !mounted {
			fi, err := os.Stat(l.DiskImage(id))
			switch {
			case err == nil:
				return allocated(fi), nil
			case !errors.Is(err, fs.ErrNotExist):
				return 0, fmt.Errorf("hostdirs: usage: %w", err)
			}
		}
	}
	var total int64
	for _, dir := range []string{d.Workspace, d.Uploads, d.Outputs} {
		n, err := treeStored(ctx, dir)
		if err != nil {
			return 0, fmt.Errorf("hostdirs: usage: %w", err)
		}
		total += n
	}
	return total, nil
}

// treeStored sums what the regular files under dir store (storedBytes),
// links not followed; a missing dir, or a file gone meanwhile, stores
// nothing.
func treeStored(ctx context.Context, dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		fi, err := e.Info()
		if err == nil {
			var n int64
			n, err = storedBytes(path, fi)
			total += n
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	return total, err
}

// storedBytes returns the bytes the regular file at path stores, fi being
// its Lstat: its size, or for a file with holes the bytes of its data
// extents. Code in a sandbox makes a file of terabytes with a few blocks
// written (truncate -s 1T) at no cost to its disk quota, and snapshots
// copy its data alone: counted at its size it would fill every quota
// that sums files. A file whose allocated blocks cover its size has no
// hole worth reading for; any other is opened (never through a link) and
// its extents summed. What path names when it is opened is measured by
// that open file, and counts nothing unless it is a regular file.
func storedBytes(path string, fi os.FileInfo) (int64, error) {
	if allocated(fi) >= fi.Size() {
		return fi.Size(), nil
	}
	return dataBytes(os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0))
}

// storedBytesAt is storedBytes of the entry name of the open folder
// dirfd, st being its Lstat.
func storedBytesAt(dirfd int, name string, st *unix.Stat_t) (int64, error) {
	if st.Blocks*512 >= st.Size {
		return st.Size, nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dataBytes(nil, err)
	}
	return dataBytes(os.NewFile(uintptr(fd), name), nil)
}

// dataBytes returns the bytes of data of f, as its open (err) gave it:
// nothing for a link or anything but a regular file.
func dataBytes(f *os.File, err error) (int64, error) {
	if errors.Is(err, syscall.ELOOP) {
		return 0, nil // a link now: links are not counted
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	now, err := f.Stat()
	if err != nil || !now.Mode().IsRegular() {
		return 0, err
	}
	return sparse.DataBytes(f, now.Size())
}
