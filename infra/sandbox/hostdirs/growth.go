package hostdirs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"threadbox/domain/snapshot"
	"threadbox/infra/sparse"
)

// RestoreGrowth returns how many more bytes container containerID's files
// store once paths (nil: its workspace, uploads and outputs whole) are
// what thread threadID's snapshot snapshotID holds ("" is the empty
// snapshot): what the snapshot's regular files there store less what the
// container's store now, negative when the restore frees space. A sparse
// file counts its data, not its size, as a snapshot's size and the
// container's Usage count it. Links count nothing, as in Usage.
func (l *Layout) RestoreGrowth(ctx context.Context, threadID, snapshotID, containerID string, paths []string) (int64, error) {
	defer l.lock(containerID)()
	src := l.SnapshotDir(threadID, snapshotID)
	var after, before int64
	if paths == nil {
		if snapshotID != "" {
			n, err := storedFolders(ctx, src)
			if err != nil {
				return 0, fmt.Errorf("hostdirs: restore growth: %w", err)
			}
			after = n
		}
		n, err := storedFolders(ctx, l.Dirs(containerID).Root)
		if err != nil {
			return 0, fmt.Errorf("hostdirs: restore growth: %w", err)
		}
		return after - n, nil
	}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := snapshot.CheckPath(p); err != nil {
			return 0, err
		}
		if snapshotID != "" {
			// The snapshot's folder is the server's own: a path in it is
			// read as it is.
			from := filepath.Join(src, filepath.FromSlash(p))
			fi, err := os.Lstat(from)
			switch {
			case err == nil && fi.Mode().IsRegular():
				n, err := storedBytes(from, fi)
				if err != nil {
					return 0, fmt.Errorf("hostdirs: restore growth %s: %w", p, err)
				}
				after += n
			case err != nil && !errors.Is(err, fs.ErrNotExist):
				return 0, fmt.Errorf("hostdirs: restore growth %s: %w", p, err)
			}
		}
		n, err := l.containerStored(containerID, p)
		if err != nil {
			return 0, fmt.Errorf("hostdirs: restore growth %s: %w", p, err)
		}
		before += n
	}
	return after - before, nil
}

// containerStored returns what the regular file at path in container
// containerID's folders stores (its data for a sparse file), reached one
// folder entry at a time without following a link; anything else, or
// nothing there, stores nothing.
func (l *Layout) containerStored(containerID, path string) (int64, error) {
	dirfd, name, err := l.openParent(containerID, path, false)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return 0, nil // missing, or a link
	}
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return 0, err
	}
	if allocated(fi) >= fi.Size() {
		return fi.Size(), nil
	}
	return sparse.DataBytes(f, fi.Size())
}
