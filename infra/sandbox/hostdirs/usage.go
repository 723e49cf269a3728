package hostdirs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"threadbox/infra/dirwalk"
	"threadbox/infra/sparse"
)

// Usage returns the bytes a container's files use: what the regular files
// in its workspace, uploads and outputs folders store (storedBytes: a
// sparse file counts its data, not its size; its skills folder holds
// copies of the org's skills and is not counted). Links are not
// followed, nor folders swapped for links while they are measured
// (storedTree). With loop quotas a container whose disk is not mounted (no
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
	total, err := storedFolders(ctx, d.Root)
	if err != nil {
		return 0, fmt.Errorf("hostdirs: usage: %w", err)
	}
	return total, nil
}

// storedFolders returns what the regular files of root's workspace,
// uploads and outputs folders store (storedTree): a container's, or a
// snapshot's, which holds the same folders. A missing root stores nothing.
func storedFolders(ctx context.Context, root string) (int64, error) {
	var total int64
	for _, dir := range snapshotFolders {
		n, err := storedTree(ctx, root, dir)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil // root is gone (the walk opens it first)
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// storedTree returns the bytes the regular files at or below top, a
// folder of root, store (storedBytesAt), links not followed. It walks by
// the folders it opened (treeWalker): code in the sandbox may swap a
// folder for a link to a host folder at any moment, and a walk by path
// would then count (and open) the host folder's files; a folder swapped
// while it is measured is left out instead. A file removed meanwhile
// counts nothing, one that cannot be measured its size. The error is the
// walk's (root not opened, a folder not listed, ctx done), with what it
// counted until then.
func storedTree(ctx context.Context, root, top string) (int64, error) {
	var n int64
	err := treeWalker.Walk(ctx, root, top, func(e *dirwalk.Entry) error {
		if e.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil
		}
		k, err := storedBytesAt(e.Dir, e.Name, &e.Stat)
		switch {
		case errors.Is(err, unix.ENOENT):
			k = 0
		case err != nil:
			k = e.Stat.Size
		}
		n += k
		return nil
	})
	return n, err
}

// treeWalker is the walk of storedTree (tests set its BeforeDescend).
var treeWalker dirwalk.Walker

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
