package checkpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/infra/dirwalk"
	"threadbox/infra/sparse"
)

// Files mirrors containers' files into the blob store with their
// checkpoints, so that a host without the container's folders restores
// them with its sandbox (the S3 store, several hosts).
//
// Each mirror is a manifest (every file, folder and symbolic link under
// the container's folders with its mode, owner, size, modification time
// and, for a file, the blob of its content) written into the checkpoint
// folder, so it travels inside the checkpoint's archive, and one blob per
// file content in the container's own namespace of the store. A file in
// which the file system reports holes (a sparse file: code in the sandbox
// makes one of terabytes at no cost to its disk quota) is sent as its
// data extents and their map (sparse.go), so that its blob, and the time
// to send and fetch it, is what the file holds rather than its size. A
// mirror is incremental: a file whose size, modification time and mode
// are those of the previous mirror keeps its blob and is neither read nor
// sent again, and blobs no file of the new mirror uses are removed once
// it is recorded. The previous mirror is kept beside the container's
// folders (stateFile), outside what any sandbox sees.
type Files struct {
	roots Roots
	blobs func(orgID, containerID string) (FileBlobs, error)
}

// Roots prepares a container's folders on this host (mounting its disk
// image first when quotas are on) and returns the folder that holds them
// (infra/sandbox/hostdirs.Layout).
type Roots interface {
	FilesRoot(ctx context.Context, id string) (string, error)
}

// FileBlobs is one container's part of the blob store (infra/blob).
type FileBlobs interface {
	Blobs
	Walk(ctx context.Context, fn func(sum string, written time.Time) error) error
}

// NewFiles returns the mirror of containers' files; blobs returns the
// store namespace of one container of an org.
func NewFiles(roots Roots, blobs func(orgID, containerID string) (FileBlobs, error)) *Files {
	return &Files{roots: roots, blobs: blobs}
}

// manifestFile, in a checkpoint folder, is the mirror of the container's
// files taken with it; stateFile, in the container's folder, is the last
// mirror this host took or applied.
const (
	manifestFile = "threadbox-files.json"
	stateFile    = ".threadbox-files.json"
)

// mirrored names the container's subfolders that are mirrored: the skills
// folder is loaded again at each turn, and lost+found belongs to the disk
// image.
var mirrored = []string{"workspace", "uploads", "outputs"}

// Manifest lists a container's files as one mirror holds them.
type Manifest struct {
	Entries []Entry `json:"entries"`
}

// Entry is one file, folder or symbolic link of a mirror.
type Entry struct {
	Path   string      `json:"path"` // slash-separated, below the container's folder
	Mode   fs.FileMode `json:"mode"`
	UID    int         `json:"uid"`
	GID    int         `json:"gid"`
	Size   int64       `json:"size,omitempty"`
	MTime  int64       `json:"mtime,omitempty"`  // Unix nanoseconds
	SHA256 string      `json:"sha256,omitempty"` // the blob of a file's content
	Link   string      `json:"link,omitempty"`
	// Extents is the blob of a file with holes, in place of SHA256: its
	// data extents and their map (encodeSparse). SHA256 is then empty, so
	// that a server that knows no such blob refuses the entry rather than
	// write the blob out as the file.
	Extents string `json:"extents,omitempty"`
}

// same reports whether a file of the previous mirror may stand for e
// without reading it.
func (e Entry) same(o Entry) bool {
	return e.Mode == o.Mode && e.Size == o.Size && e.MTime == o.MTime && o.blob() != ""
}

// blob returns the blob of a file's content, whichever way it is kept.
func (e Entry) blob() string {
	if e.Extents != "" {
		return e.Extents
	}
	return e.SHA256
}

// sums returns the blobs m's files use.
func (m Manifest) sums() map[string]bool {
	out := map[string]bool{}
	for _, e := range m.Entries {
		if b := e.blob(); b != "" {
			out[b] = true
		}
	}
	return out
}

// Mirror sends the container's files that changed since the previous
// mirror to its namespace of the store and writes the new manifest into
// the checkpoint folder dir. It returns what Commit needs once the
// checkpoint is recorded.
func (f *Files) Mirror(ctx context.Context, orgID, id, dir string) (Pending, error) {
	root, err := f.roots.FilesRoot(ctx, id)
	if err != nil {
		return Pending{}, fmt.Errorf("checkpoints: files: %w", err)
	}
	blobs, err := f.blobs(orgID, id)
	if err != nil {
		return Pending{}, fmt.Errorf("checkpoints: files: %w", err)
	}
	prev, _ := readManifest(filepath.Join(root, stateFile))
	known := map[string]Entry{}
	for _, e := range prev.Entries {
		known[e.Path] = e
	}
	var m Manifest
	sent := 0
	for _, sub := range mirrored {
		err := walker.Walk(ctx, root, sub, func(de *dirwalk.Entry) error {
			st := &de.Stat
			e := Entry{Path: de.Rel, Mode: fileMode(st), UID: int(st.Uid), GID: int(st.Gid)}
			var err error
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
			case unix.S_IFLNK:
				e.Link, err = readLink(root, e.Path)
				if errors.Is(err, errNotFile) {
					return nil // swapped since the walk: the next mirror sees what it is now
				}
				if err != nil {
					return err
				}
			case unix.S_IFREG:
				e.Size, e.MTime = st.Size, st.Mtim.Nano()
				if p, ok := known[e.Path]; ok && e.same(p) {
					e.SHA256, e.Extents = p.SHA256, p.Extents
					break
				}
				sum, sparse, err := putFile(ctx, blobs, root, e.Path, e.Size)
				if errors.Is(err, errNotFile) {
					return nil // swapped since the walk: the next mirror sees what it is now
				}
				if err != nil {
					return err
				}
				if sparse {
					e.Extents = sum
				} else {
					e.SHA256 = sum
				}
				sent++
			default:
				return nil // sockets, fifos and devices are not files to keep
			}
			m.Entries = append(m.Entries, e)
			return nil
		})
		if err != nil {
			return Pending{}, fmt.Errorf("checkpoints: files: %w", err)
		}
	}
	if err := writeManifest(filepath.Join(dir, manifestFile), m); err != nil {
		return Pending{}, err
	}
	return Pending{root: root, blobs: blobs, prev: prev, next: m, Sent: sent}, nil
}

// Pending is a mirror sent but not yet the container's: Commit makes it
// so once its checkpoint is recorded.
type Pending struct {
	root  string
	blobs FileBlobs
	prev  Manifest
	next  Manifest
	Sent  int // files whose content was sent
}

// Commit records the mirror as this host's last one and removes the
// blobs of the previous mirror that no file uses any more.
func (p Pending) Commit(ctx context.Context) error {
	if p.blobs == nil {
		return nil
	}
	if err := writeManifest(filepath.Join(p.root, stateFile), p.next); err != nil {
		return err
	}
	keep := p.next.sums()
	for sum := range p.prev.sums() {
		if !keep[sum] {
			if _, err := p.blobs.Remove(ctx, sum, time.Time{}); err != nil {
				return fmt.Errorf("checkpoints: files: remove an unused blob: %w", err)
			}
		}
	}
	return nil
}

// Apply makes the container's folders on this host those of the mirror in
// the checkpoint folder dir: files that differ are fetched from the
// store, and what the mirror does not hold is removed. A checkpoint
// without a mirror changes nothing.
func (f *Files) Apply(ctx context.Context, orgID, id, dir string) (fetched int, err error) {
	m, err := readManifest(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	root, err := f.roots.FilesRoot(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("checkpoints: files: %w", err)
	}
	blobs, err := f.blobs(orgID, id)
	if err != nil {
		return 0, fmt.Errorf("checkpoints: files: %w", err)
	}
	want := map[string]bool{}
	for _, e := range m.Entries {
		name := filepath.Clean(filepath.FromSlash(e.Path))
		if !filepath.IsLocal(name) || !slices.Contains(mirrored, strings.SplitN(filepath.ToSlash(name), "/", 2)[0]) {
			return fetched, fmt.Errorf("checkpoints: files: %q is not a file of a container", e.Path)
		}
		want[name] = true
		n, err := applyAt(ctx, blobs, root, filepath.ToSlash(name), e)
		if err != nil {
			return fetched, fmt.Errorf("checkpoints: files: %s: %w", e.Path, err)
		}
		fetched += n
	}
	// Folders last: writing into them moved their times.
	for i := len(m.Entries) - 1; i >= 0; i-- {
		if e := m.Entries[i]; e.Mode.IsDir() {
			chmodFolder(root, path.Clean(e.Path), e.Mode.Perm())
		}
	}
	// What the mirror does not hold is removed through the folder the walk
	// opened, never by path: a folder swapped for a link meanwhile is not
	// gone through.
	for _, sub := range mirrored {
		err := walker.Walk(ctx, root, sub, func(e *dirwalk.Entry) error {
			if e.Rel == sub || want[filepath.FromSlash(e.Rel)] {
				return nil
			}
			if err := dirwalk.Remove(ctx, e.Dir, e.Name); err != nil {
				return err
			}
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			return fetched, fmt.Errorf("checkpoints: files: %w", err)
		}
	}
	return fetched, writeManifest(filepath.Join(root, stateFile), m)
}

// applyAt makes rel (slash-separated, local) under root what e says. It
// writes relative to rel's folder opened by openParent, never by path:
// code in the sandbox may swap a folder above rel for a link to a host
// folder at any moment, and a write by path would then land in the host
// folder. A link on the way when the folder is opened is errNotFile; one
// swapped in later is not gone through, what is written lands in the
// folder opened. A missing folder on the way is made.
func applyAt(ctx context.Context, blobs FileBlobs, root, rel string, e Entry) (int, error) {
	dirfd, name, err := openParent(root, rel, true)
	if errors.Is(err, errNotFile) {
		return 0, fmt.Errorf("lies beyond a symbolic link: %w", err)
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(dirfd)
	if beforeWrite != nil {
		beforeWrite(rel)
	}
	return applyEntry(ctx, blobs, dirfd, name, e)
}

// applyEntry makes the entry name of the open folder dirfd what e says,
// fetching its content only when the file there differs; it returns 1
// when it fetched.
func applyEntry(ctx context.Context, blobs FileBlobs, dirfd int, name string, e Entry) (int, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return 0, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	have := err == nil
	kind := st.Mode & unix.S_IFMT
	switch {
	case e.Mode.IsDir():
		if have && kind != unix.S_IFDIR {
			if err := dirwalk.Remove(ctx, dirfd, name); err != nil {
				return 0, err
			}
		}
		if err := unix.Mkdirat(dirfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return 0, &fs.PathError{Op: "mkdir", Path: name, Err: err}
		}
		_ = unix.Fchownat(dirfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW)
		return 0, nil
	case e.Mode&fs.ModeSymlink != 0:
		if have {
			if l, err := readLinkAt(dirfd, name); err == nil && l == e.Link {
				return 0, nil
			}
			if err := dirwalk.Remove(ctx, dirfd, name); err != nil {
				return 0, err
			}
		}
		if err := unix.Symlinkat(e.Link, dirfd, name); err != nil {
			return 0, &fs.PathError{Op: "symlink", Path: name, Err: err}
		}
		_ = unix.Fchownat(dirfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW)
		return 0, nil
	}
	if have && fileMode(&st) == e.Mode && st.Size == e.Size && st.Mtim.Nano() == e.MTime {
		return 0, nil
	}
	if have {
		if err := dirwalk.Remove(ctx, dirfd, name); err != nil {
			return 0, err
		}
	}
	r, err := blobs.Open(ctx, e.blob())
	if err != nil {
		return 0, err
	}
	defer r.Close()
	// Whatever holds the temporary name (the sandbox may have left a link
	// there) goes first; the file is then made new, never opened through
	// a link.
	tmp := name + ".threadbox-part"
	if err := dirwalk.Remove(ctx, dirfd, tmp); err != nil {
		return 0, err
	}
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: tmp, Err: err}
	}
	out := os.NewFile(uintptr(fd), tmp)
	if e.Extents != "" {
		err = decodeSparse(out, r, e.Size)
	} else {
		_, err = io.Copy(out, r)
	}
	if err == nil {
		_ = out.Chown(e.UID, e.GID)
		err = out.Chmod(e.Mode.Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		t := unix.NsecToTimespec(e.MTime)
		err = unix.UtimesNanoAt(dirfd, tmp, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return 0, err
	}
	return 1, nil
}

// chmodFolder sets the permissions of the folder rel (slash-separated,
// local) under root, through the folder opened by openParent and then
// itself opened with O_NOFOLLOW: one that is no longer a folder inside
// root is left alone.
func chmodFolder(root, rel string, perm fs.FileMode) {
	dirfd, name, err := openParent(root, rel, false)
	if err != nil {
		return
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_ = unix.Fchmod(fd, uint32(perm))
	_ = unix.Close(fd)
}

// Forget removes every blob of the container's mirror: the container is
// removed.
func (f *Files) Forget(ctx context.Context, orgID, id string) error {
	blobs, err := f.blobs(orgID, id)
	if err != nil {
		return fmt.Errorf("checkpoints: files: %w", err)
	}
	var sums []string
	if err := blobs.Walk(ctx, func(sum string, _ time.Time) error { sums = append(sums, sum); return nil }); err != nil {
		return fmt.Errorf("checkpoints: files: %w", err)
	}
	for _, sum := range sums {
		if _, err := blobs.Remove(ctx, sum, time.Time{}); err != nil {
			return fmt.Errorf("checkpoints: files: %w", err)
		}
	}
	return nil
}

// walker walks the container's folders by the folders it opened, never
// through a link (tests set its BeforeDescend).
var walker dirwalk.Walker

// beforeWrite, when set, is called with each entry Apply makes, just
// before it writes it (tests swap a folder above it for a link there).
var beforeWrite func(rel string)

// fileMode is the fs.FileMode of a stat's mode, as os.Lstat gives it.
func fileMode(st *unix.Stat_t) fs.FileMode {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// putFile sends the first size bytes of the file rel (slash-separated)
// under root (its size when the walk found it) to the store and returns
// their blob, and whether it holds them as a sparse file's data extents:
// so it does when the file system reports a hole in them. The file is
// opened by openFile, never through a link: one that is no longer a
// regular file inside root is errNotFile.
func putFile(ctx context.Context, blobs FileBlobs, root, rel string, size int64) (string, bool, error) {
	in, err := openFile(root, rel)
	if err != nil {
		return "", false, err
	}
	defer in.Close()
	holes, err := sparse.HasHole(in, size)
	if err != nil {
		return "", false, err
	}
	if !holes {
		sum, _, err := blobs.Put(ctx, io.NewSectionReader(in, 0, size))
		return sum, false, err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(encodeSparse(pw, in, size))
	}()
	sum, _, err := blobs.Put(ctx, pr)
	pr.CloseWithError(errors.New("checkpoints: files: the store stopped reading"))
	<-done
	return sum, true, err
}

func readManifest(path string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("checkpoints: files: %s: %w", filepath.Base(path), err)
	}
	return m, nil
}

func writeManifest(path string, m Manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("checkpoints: files: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("checkpoints: files: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("checkpoints: files: %w", err)
	}
	return nil
}

// errNotFile reports a path the walk found a regular file that is not one
// when it is opened: code in the sandbox made it, or a folder above it, a
// symbolic link or another kind of file since.
var errNotFile = errors.New("not a regular file of the container's folders")

// openParent opens the folder that holds rel (slash-separated, local)
// under root without following a symbolic link anywhere below root: each
// folder is opened relative to the one above it with O_NOFOLLOW. It
// returns the folder's descriptor, for the caller to close, and rel's
// last name. A link or another kind of file on the way is errNotFile; a
// missing folder is made (0700, as os.MkdirAll would) when mkdir is set.
func openParent(root, rel string, mkdir bool) (int, string, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &fs.PathError{Op: "open", Path: root, Err: err}
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps[:len(comps)-1] {
		sub, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if mkdir && errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, 0o700); err == nil || errors.Is(err, unix.EEXIST) {
				sub, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		_ = unix.Close(fd)
		if err != nil {
			return -1, "", notFile("open", rel, err)
		}
		fd = sub
	}
	return fd, comps[len(comps)-1], nil
}

// notFile is the error of op on rel: errNotFile when what lies on the
// way is a link or not a folder.
func notFile(op, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("%s %s: %w: %w", op, rel, errNotFile, err)
	}
	return &fs.PathError{Op: op, Path: rel, Err: err}
}

// readLink returns the target of the symbolic link rel (slash-separated,
// local) under root, read relative to its folder opened by openParent:
// a folder above it that code in the sandbox swapped for a link since
// the walk is errNotFile, never a way to read a link of the host. What
// is no longer a link is errNotFile too.
func readLink(root, rel string) (string, error) {
	fd, name, err := openParent(root, rel, false)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	l, err := readLinkAt(fd, name)
	if errors.Is(err, unix.EINVAL) {
		return "", fmt.Errorf("readlink %s: %w: %w", rel, errNotFile, err)
	}
	if err != nil {
		return "", notFile("readlink", rel, err)
	}
	return l, nil
}

// readLinkAt returns the target of the symbolic link name in the open
// folder dirfd (EINVAL when it is no link).
func readLinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// openFile opens the regular file rel (slash-separated, local) under root
// without following a symbolic link anywhere below root: its folder is
// opened by openParent, and the file with O_NOFOLLOW and O_NONBLOCK (a
// fifo does not wait for a writer), then checked to be regular by the
// Fstat of what was opened. A link or another kind of file on the way is
// errNotFile.
func openFile(root, rel string) (*os.File, error) {
	fd, name, err := openParent(root, rel, false)
	if err != nil {
		return nil, err
	}
	ffd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	_ = unix.Close(fd)
	if err != nil {
		return nil, notFile("open", rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(ffd, &st); err != nil {
		_ = unix.Close(ffd)
		return nil, &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(ffd)
		return nil, fmt.Errorf("open %s: %w", rel, errNotFile)
	}
	return os.NewFile(uintptr(ffd), filepath.Join(root, filepath.FromSlash(rel))), nil
}
