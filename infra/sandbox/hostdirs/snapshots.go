package hostdirs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/snapshot"
	"threadbox/infra/dirwalk"
	"threadbox/infra/sparse"
)

// A thread's files snapshots live beside the containers' folders, in
// DATA_DIR/snapshots/<safe thread id>/<safe snapshot id>/, one folder per
// snapshot holding a copy of the container's workspace, uploads and outputs
// folders and manifest.json, the size, modification time and digest of
// each file (the SHA-256 of its content, or of its data for a file with
// holes: digest.go). A snapshot is written under a temporary name and
// renamed when whole, and never changed after: a file unchanged since the
// snapshot before (same size and modification time, or same digest) is a
// hard link to that one's, so snapshots share their unchanged files. A
// changed file is cloned (FICLONE: a reflink on XFS or btrfs, sharing the
// container file's blocks until either is written) or, where the file
// system cannot, copied, its holes kept. The container's folders are the
// sandbox's, so they are read and written through file descriptors, one
// folder entry at a time, never following a link: a link the sandbox made
// is kept as a link.

// snapshotFolders are the container folders a snapshot holds.
var snapshotFolders = snapshot.Folders

// manifestFile names a snapshot's list of its files.
const manifestFile = "manifest.json"

// entry describes one file of a snapshot, by its path under the
// snapshot's folder ("workspace/a/b.txt").
type entry struct {
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	Mode    uint32 `json:"mode"`
	SHA256  string `json:"sha256,omitempty"` // the content's digest (hashFile)
	Link    string `json:"link,omitempty"`   // a symbolic link's target
}

// SnapshotDir returns the folder of a thread's snapshot.
func (l *Layout) SnapshotDir(threadID, snapshotID string) string {
	return filepath.Join(l.snapshots, SafeID(threadID), SafeID(snapshotID))
}

// stateFolder names the folder of a turn snapshot that holds the running
// state of the container's sandbox (app/containers.Service.SaveState),
// where its backend checkpoints. It is written after the snapshot's files
// and goes with them.
const stateFolder = "state"

// NewStateDir makes the empty folder of the running state of a thread's
// snapshot, replacing any earlier one, and returns it.
func (l *Layout) NewStateDir(ctx context.Context, threadID, snapshotID string) (string, error) {
	dir := l.StateDir(threadID, snapshotID)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("hostdirs: state folder: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("hostdirs: state folder: %w", err)
	}
	return dir, nil
}

// StateDir returns the folder of the running state of a thread's
// snapshot, whether or not it exists.
func (l *Layout) StateDir(threadID, snapshotID string) string {
	return filepath.Join(l.SnapshotDir(threadID, snapshotID), stateFolder)
}

// StateBytes returns the bytes the running state of a thread's snapshot
// stores (0 without one).
func (l *Layout) StateBytes(threadID, snapshotID string) int64 {
	return TreeBytes(l.StateDir(threadID, snapshotID))
}

// TreeBytes returns the bytes the regular files under dir store (a sparse
// file's data, not its size: storedBytes), links not followed, dir itself
// included; 0 when it does not exist. It walks by the folders it opened
// (storedTree): a folder swapped for a link while it is measured is left
// out, never gone through.
func TreeBytes(dir string) int64 {
	n, _ := storedTree(context.Background(), dir, ".")
	return n
}

// TakeSnapshot copies container containerID's workspace, uploads and
// outputs folders into thread threadID's snapshot snapshotID, linking the
// files unchanged since snapshot prevID ("" for none).
func (l *Layout) TakeSnapshot(ctx context.Context, threadID, snapshotID, prevID, containerID string) (snapshot.Stats, error) {
	defer l.lock(containerID)()
	dst := l.SnapshotDir(threadID, snapshotID)
	prev := map[string]entry{}
	prevDir := ""
	if prevID != "" {
		prevDir = l.SnapshotDir(threadID, prevID)
		if data, err := os.ReadFile(filepath.Join(prevDir, manifestFile)); err == nil {
			_ = json.Unmarshal(data, &prev) // unreadable: nothing is linked
		}
	}
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return snapshot.Stats{}, fmt.Errorf("hostdirs: snapshot: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return snapshot.Stats{}, fmt.Errorf("hostdirs: snapshot: %w", err)
	}
	t := &taker{ctx: ctx, prev: prev, prevDir: prevDir, dst: tmp, manifest: map[string]entry{}}
	d := l.Dirs(containerID)
	for _, name := range snapshotFolders {
		src := filepath.Join(d.Root, name)
		fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err == nil {
			err = os.Mkdir(filepath.Join(tmp, name), 0o755)
		}
		if err == nil {
			err = t.dir(fd, name)
			unix.Close(fd)
		}
		if err != nil {
			_ = os.RemoveAll(tmp)
			return snapshot.Stats{}, fmt.Errorf("hostdirs: snapshot %s: %w", name, err)
		}
	}
	t.stats.Unchanged = prevID != "" && sameManifest(prev, t.manifest)
	data, err := json.Marshal(t.manifest)
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, manifestFile), data, 0o600)
	}
	if err == nil {
		_ = os.RemoveAll(dst)
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return snapshot.Stats{}, fmt.Errorf("hostdirs: snapshot: %w", err)
	}
	return t.stats, nil
}

// taker copies one container's folders into a snapshot.
type taker struct {
	ctx      context.Context
	prev     map[string]entry
	prevDir  string
	dst      string
	manifest map[string]entry
	stats    snapshot.Stats
}

// dir copies the folder open as fd, at rel under the snapshot.
func (t *taker) dir(fd int, rel string) error {
	names, err := dirwalk.Names(fd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := t.ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return err
		}
		r := rel + "/" + name
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
					continue // changed meanwhile
				}
				return err
			}
			err = os.Mkdir(filepath.Join(t.dst, r), os.FileMode(st.Mode&0o777)|0o700)
			if err == nil {
				err = t.dir(sub, r)
			}
			unix.Close(sub)
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := readlinkat(fd, name)
			if err != nil {
				continue
			}
			if err := os.Symlink(target, filepath.Join(t.dst, r)); err != nil {
				return err
			}
			t.manifest[r] = entry{Link: target}
		case unix.S_IFREG:
			if err := t.file(fd, name, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// file copies the regular file name of the folder fd to rel, or links
// the previous snapshot's copy when it is unchanged.
func (t *taker) file(dirfd int, name, rel string) error {
	src, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
			return nil // changed meanwhile
		}
		return err
	}
	in := os.NewFile(uintptr(src), name)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	e := entry{Size: st.Size, MtimeNs: st.Mtim.Nano(), Mode: st.Mode & 0o777}
	to := filepath.Join(t.dst, rel)
	p, had := t.prev[rel]
	if had && p.Link == "" && p.Size == e.Size && p.MtimeNs == e.MtimeNs {
		e.SHA256 = p.SHA256
		if err := os.Link(filepath.Join(t.prevDir, rel), to); err == nil {
			return t.add(rel, e, false)
		}
	}
	sum, cloned, err := cloneFile(in, to, os.FileMode(e.Mode)|0o600)
	if err != nil {
		return err
	}
	e.SHA256 = sum
	if had && p.Link == "" && p.SHA256 == sum && p.Size == e.Size {
		// Touched, not changed: share the previous copy.
		if err := os.Remove(to); err == nil && os.Link(filepath.Join(t.prevDir, rel), to) == nil {
			return t.add(rel, e, false)
		}
		if _, _, err := cloneFile(in, to, os.FileMode(e.Mode)|0o600); err != nil {
			return err
		}
	}
	// The copy keeps the file's modification time, which a restore gives
	// back.
	mt := time.Unix(0, e.MtimeNs)
	if err := os.Chtimes(to, mt, mt); err != nil {
		return err
	}
	if cloned {
		t.stats.Cloned++
	}
	return t.add(rel, e, true)
}

// add records a file of the snapshot; own tells that it is not linked.
// The snapshot's Size and Stored count what its copy at rel stores, a
// sparse file's data and not its size (storedBytes): the manifest keeps
// the size, which restores and listings give back.
func (t *taker) add(rel string, e entry, own bool) error {
	path := filepath.Join(t.dst, rel)
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	n, err := storedBytes(path, fi)
	if err != nil {
		return err
	}
	t.manifest[rel] = e
	t.stats.Files++
	t.stats.Size += n
	if own {
		t.stats.Stored += n
	}
	return nil
}

// cloneFile makes a new file at to with in's content, by reflink where
// the file systems allow and by copy otherwise, and returns the content's
// digest (hashFile's) and whether it was a reflink.
func cloneFile(in *os.File, to string, mode os.FileMode) (string, bool, error) {
	out, err := os.OpenFile(to, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", false, err
	}
	var sum string
	cloned := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil
	if cloned {
		sum, _, err = hashFile(out)
	} else {
		sum, err = copySparse(out, in)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(to)
		return "", false, err
	}
	return sum, cloned, nil
}

// copySparse copies in into out (new and empty) and returns the digest of
// what it copied (hashFile's). Only in's data is read and written
// (sparse.Copy): its holes stay holes in out, so a file the sandbox made
// sparse (a size of terabytes with a few blocks written) takes no more
// room in the copy than in the container, where the container's disk
// quota bounds it, and no more time than its data; written out as zeros,
// it would fill the host's disk. The copy holds in's size when it was
// stat'ed: a file that shrinks meanwhile ends early.
func copySparse(out, in *os.File) (string, error) {
	fi, err := in.Stat()
	if err != nil {
		return "", err
	}
	h, err := newContentHash(in, fi.Size())
	if err != nil {
		return "", err
	}
	size, err := sparse.CopyExtents(in, fi.Size(), func(off int64) io.Writer {
		return io.MultiWriter(io.NewOffsetWriter(out, off), io.NewOffsetWriter(h, off))
	})
	if err == nil {
		err = out.Truncate(size)
	}
	if err != nil {
		return "", err
	}
	return h.sum(size), nil
}

// RestoreSnapshot makes container containerID's workspace, uploads and
// outputs folders hold exactly what thread threadID's snapshot snapshotID
// holds: their entries are removed, then the snapshot's files are cloned
// (or copied) in, owned by the sandbox user when the server runs as root.
// The container's folders must be prepared.
func (l *Layout) RestoreSnapshot(ctx context.Context, threadID, snapshotID, containerID string) error {
	defer l.lock(containerID)()
	src := l.SnapshotDir(threadID, snapshotID)
	if _, err := os.Stat(filepath.Join(src, manifestFile)); err != nil {
		return fmt.Errorf("hostdirs: restore snapshot: %w", err)
	}
	d := l.Dirs(containerID)
	chown := os.Geteuid() == 0
	for _, name := range snapshotFolders {
		fd, err := unix.Open(filepath.Join(d.Root, name), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("hostdirs: restore snapshot %s: %w", name, err)
		}
		err = dirwalk.Clear(ctx, fd)
		if err == nil {
			err = restoreDir(ctx, filepath.Join(src, name), fd, chown)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("hostdirs: restore snapshot %s: %w", name, err)
		}
	}
	return nil
}

// restoreDir copies the snapshot folder from into the folder open as fd.
func restoreDir(ctx context.Context, from string, fd int, chown bool) error {
	ents, err := os.ReadDir(from)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the folder was missing when the snapshot was taken
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(from, e.Name())
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := unix.Symlinkat(target, fd, e.Name()); err != nil {
				return err
			}
			if chown {
				_ = unix.Fchownat(fd, e.Name(), SandboxUID, SandboxGID, unix.AT_SYMLINK_NOFOLLOW)
			}
		case fi.IsDir():
			if err := unix.Mkdirat(fd, e.Name(), uint32(fi.Mode().Perm())); err != nil {
				return err
			}
			sub, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if chown {
				_ = unix.Fchown(sub, SandboxUID, SandboxGID)
			}
			err = restoreDir(ctx, path, sub, chown)
			unix.Close(sub)
			if err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := restoreFile(path, fd, e.Name(), uint32(fi.Mode().Perm()), chown); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreFile clones (or copies) the snapshot file at path to name in the
// folder fd.
func restoreFile(path string, dirfd int, name string, mode uint32, chown bool) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	ofd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(ofd), name)
	if unix.IoctlFileClone(ofd, int(in.Fd())) != nil {
		err = sparse.Copy(out, in)
	}
	if err == nil && chown {
		err = unix.Fchown(ofd, SandboxUID, SandboxGID)
	}
	if err == nil {
		err = unix.Fchmod(ofd, mode) // the umask narrowed it
	}
	if fi, serr := in.Stat(); err == nil && serr == nil {
		// The snapshot's modification time, so that the next snapshot
		// finds the file unchanged without reading it.
		mt := unix.NsecToTimespec(fi.ModTime().UnixNano())
		err = unix.UtimesNanoAt(dirfd, name, []unix.Timespec{mt, mt}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// DropSnapshot removes one of a thread's snapshots; a missing one is not
// an error. Its files linked by a later snapshot stay there.
func (l *Layout) DropSnapshot(ctx context.Context, threadID, snapshotID string) error {
	if err := os.RemoveAll(l.SnapshotDir(threadID, snapshotID)); err != nil {
		return fmt.Errorf("hostdirs: drop snapshot: %w", err)
	}
	return nil
}

// DropSnapshots removes every snapshot of a thread.
func (l *Layout) DropSnapshots(ctx context.Context, threadID string) error {
	if err := os.RemoveAll(filepath.Join(l.snapshots, SafeID(threadID))); err != nil {
		return fmt.Errorf("hostdirs: drop snapshots: %w", err)
	}
	return nil
}

// readlinkat returns the target of the link name in the folder fd.
func readlinkat(fd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return "", err
	}
	return strings.Clone(string(buf[:n])), nil
}
