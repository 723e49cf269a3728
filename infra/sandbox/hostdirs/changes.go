package hostdirs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"threadbox/domain/fault"
	"threadbox/domain/snapshot"
	"threadbox/infra/dirwalk"
)

// What a tool call changed is read from the snapshots before and after it
// (their manifests and files); reverting it writes back, path by path,
// the files the snapshot before it held. As everywhere in the container's
// folders, paths are walked one entry at a time through file descriptors,
// never following a link.

// sameManifest tells whether two manifests list the same paths with the
// same content.
func sameManifest(a, b map[string]entry) bool {
	if len(a) != len(b) {
		return false
	}
	for p, x := range a {
		y, ok := b[p]
		if !ok || !x.file().Same(y.file()) {
			return false
		}
	}
	return true
}

// file is the entry as the domain's snapshot.File.
func (e entry) file() snapshot.File {
	return snapshot.File{Size: e.Size, Mode: e.Mode, SHA256: e.SHA256, Link: e.Link}
}

// SnapshotManifest returns the files of a thread's snapshot by path
// ("workspace/a.txt"); snapshotID "" is the empty snapshot.
func (l *Layout) SnapshotManifest(ctx context.Context, threadID, snapshotID string) (map[string]snapshot.File, error) {
	out := map[string]snapshot.File{}
	if snapshotID == "" {
		return out, nil
	}
	data, err := os.ReadFile(filepath.Join(l.SnapshotDir(threadID, snapshotID), manifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fault.Errorf(fault.NotFound, "snapshot %s: its files are no longer kept", snapshotID)
	}
	if err != nil {
		return nil, fmt.Errorf("hostdirs: snapshot manifest: %w", err)
	}
	var m map[string]entry
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("hostdirs: snapshot manifest %s: %w", snapshotID, err)
	}
	for p, e := range m {
		out[p] = e.file()
	}
	return out, nil
}

// SnapshotFile returns up to max bytes of the regular file at path in a
// thread's snapshot, and whether it holds more.
func (l *Layout) SnapshotFile(ctx context.Context, threadID, snapshotID, path string, max int64) ([]byte, bool, error) {
	if err := snapshot.CheckPath(path); err != nil {
		return nil, false, err
	}
	full := filepath.Join(l.SnapshotDir(threadID, snapshotID), filepath.FromSlash(path))
	fi, err := os.Lstat(full)
	if err != nil {
		return nil, false, fmt.Errorf("hostdirs: snapshot file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fault.Errorf(fault.Invalid, "%s is not a regular file in the snapshot", path)
	}
	f, err := os.Open(full)
	if err != nil {
		return nil, false, fmt.Errorf("hostdirs: snapshot file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, fmt.Errorf("hostdirs: snapshot file: %w", err)
	}
	if int64(len(data)) > max {
		return data[:max], true, nil
	}
	return data, false, nil
}

// openParent opens the folder holding path in container containerID's
// folders, one entry at a time without following links; with create, the
// missing folders on the way are made (owned by the sandbox user when the
// server runs as root). It returns the folder's descriptor and the last
// name of path; a missing folder is os.ErrNotExist.
func (l *Layout) openParent(containerID, path string, create bool) (int, string, error) {
	if err := snapshot.CheckPath(path); err != nil {
		return -1, "", err
	}
	parts := strings.Split(path, "/")
	fd, err := unix.Open(l.Dirs(containerID).Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	for _, name := range parts[:len(parts)-1] {
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				sub, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil && os.Geteuid() == 0 {
					_ = unix.Fchown(sub, SandboxUID, SandboxGID)
				}
			}
		}
		unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				return -1, "", os.ErrNotExist
			}
			return -1, "", err
		}
		fd = sub
	}
	return fd, parts[len(parts)-1], nil
}

// ContainerFiles returns the files at paths in container containerID's
// folders as they are now, hashed as a snapshot hashes them; a path that
// is missing or not a file or link is left out.
func (l *Layout) ContainerFiles(ctx context.Context, containerID string, paths []string) (map[string]snapshot.File, error) {
	defer l.lock(containerID)()
	out := map[string]snapshot.File{}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, ok, err := l.containerFile(ctx, containerID, p)
		if err != nil {
			return nil, fmt.Errorf("hostdirs: container file %s: %w", p, err)
		}
		if ok {
			out[p] = f
		}
	}
	return out, nil
}

// containerFile is one path of ContainerFiles. A regular file is hashed
// as the descriptor opened finds it, by its data up to the size it has
// then, unless ctx has ended: the sandbox may have put something else at
// the path since it was checked (a FIFO that never ends), or write on.
func (l *Layout) containerFile(ctx context.Context, containerID, path string) (snapshot.File, bool, error) {
	dirfd, name, err := l.openParent(containerID, path, false)
	if errors.Is(err, os.ErrNotExist) {
		return snapshot.File{}, false, nil
	}
	if err != nil {
		return snapshot.File{}, false, err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return snapshot.File{}, false, nil
		}
		return snapshot.File{}, false, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		return snapshot.File{Link: target}, err == nil, err
	case unix.S_IFREG:
		if l.opts.opening != nil {
			l.opts.opening(path)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return snapshot.File{}, false, err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		if err := unix.Fstat(fd, &st); err != nil {
			return snapshot.File{}, false, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return snapshot.File{}, false, nil
		}
		// The hash reads the file's data alone (a hole is never read), up
		// to the size it has now: bounded by the container's disk quota.
		if err := ctx.Err(); err != nil {
			return snapshot.File{}, false, err
		}
		sum, n, err := hashFile(f)
		if err != nil {
			return snapshot.File{}, false, err
		}
		return snapshot.File{Size: n, Mode: st.Mode & 0o777, SHA256: sum}, true, nil
	}
	return snapshot.File{}, false, nil
}

// RestorePaths makes each of paths in container containerID's folders
// what it is in thread threadID's snapshot snapshotID: the snapshot's file
// or link cloned (or copied) back, or the path removed when the snapshot
// does not hold it ("" is the empty snapshot). Folders missing on the way
// are made; nothing else of the container changes.
func (l *Layout) RestorePaths(ctx context.Context, threadID, snapshotID, containerID string, paths []string) error {
	defer l.lock(containerID)()
	man, err := l.SnapshotManifest(ctx, threadID, snapshotID)
	if err != nil {
		return err
	}
	chown := os.Geteuid() == 0
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, keep := man[p]
		dirfd, name, err := l.openParent(containerID, p, keep)
		if errors.Is(err, os.ErrNotExist) && !keep {
			continue // gone already, with its folder
		}
		if err != nil {
			return fmt.Errorf("hostdirs: restore %s: %w", p, err)
		}
		if keep {
			from := filepath.Join(l.SnapshotDir(threadID, snapshotID), filepath.FromSlash(p))
			err = replaceEntry(ctx, dirfd, name, func(to string) error {
				if e.Link == "" {
					return restoreFile(from, dirfd, to, e.Mode, chown)
				}
				err := unix.Symlinkat(e.Link, dirfd, to)
				if err == nil && chown {
					_ = unix.Fchownat(dirfd, to, SandboxUID, SandboxGID, unix.AT_SYMLINK_NOFOLLOW)
				}
				return err
			})
		} else {
			err = dirwalk.Remove(ctx, dirfd, name)
		}
		unix.Close(dirfd)
		if err != nil {
			return fmt.Errorf("hostdirs: restore %s: %w", p, err)
		}
		if !keep {
			l.pruneMade(containerID, threadID, snapshotID, p)
		}
	}
	return nil
}

// pruneMade removes the folders above rel, nearest first, that snapshot
// snapshotID ("" the empty one) did not hold and that are empty now: those
// a reverted call made for the files it created. It stops at the first
// folder the snapshot held, or that holds anything.
func (l *Layout) pruneMade(containerID, threadID, snapshotID, rel string) {
	for dir := path.Dir(rel); strings.Contains(dir, "/"); dir = path.Dir(dir) {
		if snapshotID != "" {
			if _, err := os.Lstat(filepath.Join(l.SnapshotDir(threadID, snapshotID), filepath.FromSlash(dir))); !errors.Is(err, os.ErrNotExist) {
				return
			}
		}
		dirfd, name, err := l.openParent(containerID, dir, false)
		if err != nil {
			return
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		unix.Close(dirfd)
		if err != nil {
			return
		}
	}
}

// replaceEntry puts what put writes in place of name in the folder dirfd
// without a moment when name is missing: put writes a new entry under a
// hidden name beside it, which is renamed over name, so a program in the
// sandbox reads the old file or the new one, never neither. When the new
// entry does not fit beside the old one (the disk quota), name is removed
// first and put writes it in place; a folder at name, which a rename
// cannot replace, is removed before the rename. A put that fails
// otherwise leaves name as it was.
func replaceEntry(ctx context.Context, dirfd int, name string, put func(to string) error) error {
	var b [6]byte
	_, _ = rand.Read(b[:])
	tmp := ".threadbox-restore-" + hex.EncodeToString(b[:])
	if err := put(tmp); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
			return err
		}
		if err := dirwalk.Remove(ctx, dirfd, name); err != nil {
			return err
		}
		return put(name)
	}
	err := unix.Renameat(dirfd, tmp, dirfd, name)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		if err = dirwalk.Remove(ctx, dirfd, name); err == nil {
			err = unix.Renameat(dirfd, tmp, dirfd, name)
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
	}
	return err
}

// SnapshotThreads lists the threads that have a snapshots folder, by the
// folder's name (a thread id whose SafeID is itself; others are left out,
// as their id cannot be told back from the folder's name).
func (l *Layout) SnapshotThreads(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(l.snapshots)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hostdirs: snapshot threads: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && SafeID(e.Name()) == e.Name() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
