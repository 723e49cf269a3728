// Package fsroot is the only code that opens sandbox files on the host. It
// gives confined access to one container's host folders (workspace, uploads,
// outputs, skills) and never follows a symbolic link: every path is resolved
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) from the mount's folder,
// or, where the kernel lacks openat2, one component at a time with
// openat(O_NOFOLLOW), and the last component is opened, stat'ed, renamed or
// unlinked relative to its already-opened parent. A sandbox that swaps a file
// for a symlink at any moment can therefore never make the host read or
// write outside its folders, nor through a link inside them.
//
// os.Root is not used: it follows symlinks that stay inside the root, which
// the contract forbids ("the host never follows a symlink created inside a
// sandbox"), and it cannot refuse a symlinked intermediate folder without a
// racy check-then-open.
//
// An upload onto a name that is a symlink replaces the link itself (rename
// over it); nothing is written where the link pointed.
package fsroot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/file"
)

// The errors of this package; they are the domain's values, so app and web
// can map them without importing infra.
var (
	ErrNotFound   = file.ErrNotFound
	ErrNotRegular = file.ErrNotRegular
	ErrSymlink    = file.ErrSymlink
	ErrTooLarge   = file.ErrTooLarge
	ErrReadOnly   = file.ErrReadOnly
	ErrInvalidRel = file.ErrInvalidRel
)

// MaxDepth bounds how deep List and RemovePrefix descend.
const MaxDepth = 64

// MaxEntries bounds how many entries one List or ReadDir returns; past it
// they fail with ErrTooLarge.
const MaxEntries = 100_000

// tempPrefix starts the names of in-flight uploads; listings skip them.
const tempPrefix = ".tb-upload-"

// Dirs are the host folders of one container.
type Dirs struct {
	Workspace string
	Uploads   string
	Outputs   string
	Skills    string
}

// Owner is the user and group that created files and folders are given, so
// the sandbox user can change them. Nil keeps the server's own.
type Owner struct {
	UID, GID int
}

// Options tune an FS.
type Options struct {
	Owner *Owner
	// SharedDisk says the folders are on the server's own file system (no
	// quota file system per container): a full disk is the server's.
	SharedDisk bool
	// noOpenat2 forces the component-by-component walk (tests).
	noOpenat2 bool
	// synced, when set, sees every fsync of a folder, or of a file the
	// package did not write itself (tests).
	synced func(fd int)
}

// FS gives confined access to one container's folders.
type FS struct {
	dirs map[file.Mount]string
	opts Options
}

// New returns the confined file access for a container's folders.
func New(d Dirs, opts Options) *FS {
	return &FS{
		dirs: map[file.Mount]string{
			file.Workspace: d.Workspace,
			file.Uploads:   d.Uploads,
			file.Outputs:   d.Outputs,
			file.Skills:    d.Skills,
		},
		opts: opts,
	}
}

// syncFD makes a folder's entries, or a file's content, durable: an answer
// that says a file was written or removed must outlive a crash or a journal
// that aborts. Nothing here syncs a whole file system (syncfs): on a disk
// the containers share, that would wait for every tenant's writes.
func (f *FS) syncFD(fd int) error {
	if f.opts.synced != nil {
		f.opts.synced(fd)
	}
	return unix.Fsync(fd)
}

// splitRel checks a path within a mount and returns its components; "." and
// "" name the mount itself and return none.
func splitRel(rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	if len(rel) > file.MaxPathLen || rel[0] == '/' || strings.IndexByte(rel, 0) >= 0 {
		return nil, fmt.Errorf("%w: %q", ErrInvalidRel, rel)
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%w: %q", ErrInvalidRel, rel)
		}
	}
	return comps, nil
}

// openMount opens the mount's host folder. The folder itself is the
// server's, created by the host layout, but it is still opened O_NOFOLLOW.
func (f *FS) openMount(m file.Mount) (int, error) {
	dir, ok := f.dirs[m]
	if !ok || dir == "" {
		return -1, fmt.Errorf("%w: no %q folder", ErrNotFound, m)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, mapErrno("open "+string(m), err)
	}
	return fd, nil
}

// openDir opens the folder comps beneath root, refusing symlinks anywhere.
// The caller closes the returned descriptor.
func (f *FS) openDir(root int, comps []string) (int, error) {
	if len(comps) == 0 {
		fd, err := unix.Dup(root)
		if err != nil {
			return -1, fmt.Errorf("fsroot: dup: %w", err)
		}
		unix.CloseOnExec(fd)
		return fd, nil
	}
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if !f.opts.noOpenat2 {
		fd, err := unix.Openat2(root, strings.Join(comps, "/"), &unix.OpenHow{
			Flags:   flags,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == nil {
			return fd, nil
		}
		if errors.Is(err, unix.ENOENT) {
			return -1, mapErrno("open "+strings.Join(comps, "/"), err)
		}
		// ENOSYS (old kernel), EPERM (seccomp) or a refusal: the walk
		// below is just as safe and names the offending component.
	}
	cur := root
	for i, c := range comps {
		fd, err := unix.Openat(cur, c, flags|unix.O_NOFOLLOW, 0)
		if err != nil {
			err = componentErr(cur, c, strings.Join(comps[:i+1], "/"), err)
		}
		if cur != root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// componentErr explains why folder name under dirfd could not be opened
// with O_NOFOLLOW|O_DIRECTORY: the kernel says ENOTDIR for a symlink too.
func componentErr(dirfd int, name, rel string, err error) error {
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		if st, serr := statxAt(dirfd, name); serr == nil && fileType(&st) == unix.S_IFLNK {
			return fmt.Errorf("fsroot: open %s: %w", rel, ErrSymlink)
		}
	}
	return mapErrno("open "+rel, err)
}

// openParent opens the mount and the parent folder of rel, and returns the
// parent's descriptor and rel's last component. rel must name something
// inside the mount, not the mount itself.
func (f *FS) openParent(m file.Mount, rel string) (int, string, error) {
	comps, err := splitRel(rel)
	if err != nil {
		return -1, "", err
	}
	if len(comps) == 0 {
		return -1, "", fmt.Errorf("%w: the mount folder itself", ErrNotRegular)
	}
	root, err := f.openMount(m)
	if err != nil {
		return -1, "", err
	}
	defer unix.Close(root)
	parent, err := f.openDir(root, comps[:len(comps)-1])
	if err != nil {
		return -1, "", err
	}
	return parent, comps[len(comps)-1], nil
}

// mapErrno turns a system error into one of the package's errors.
func mapErrno(op string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENAMETOOLONG): // no such name can exist
		return fmt.Errorf("fsroot: %s: %w", op, ErrNotFound)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("fsroot: %s: %w", op, ErrSymlink)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("fsroot: %s: %w: %w", op, file.ErrNotDir, ErrNotFound)
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENXIO):
		return fmt.Errorf("fsroot: %s: %w", op, ErrNotRegular)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("fsroot: %s: %w: %w", op, file.ErrDiskFull, ErrTooLarge)
	}
	return fmt.Errorf("fsroot: %s: %w", op, err)
}

// diskFullErr maps a write's error on fd like mapErrno, telling whose disk
// is full when it is: the server's when the folders share its disk, or
// when the container's own file system still has room (its image sits on
// the server's disk, which could not take the blocks); else the
// container's (its quota).
func (f *FS) diskFullErr(op string, fd int, err error) error {
	if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		return mapErrno(op, err)
	}
	var st unix.Statfs_t
	if f.opts.SharedDisk || (unix.Fstatfs(fd, &st) == nil && int64(st.Bavail)*int64(st.Bsize) >= roomLeft) {
		return fmt.Errorf("fsroot: %s: %w: %w", op, file.ErrServerDiskFull, err)
	}
	return mapErrno(op, err)
}

// roomLeft is the free space of a container's file system above which a
// write failing for space is blamed on the disk under it.
const roomLeft = 1 << 20

// statxAt stats name under dirfd without following a symlink ("" stats
// dirfd itself).
func statxAt(dirfd int, name string) (unix.Statx_t, error) {
	var st unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_SYNC_AS_STAT
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	err := unix.Statx(dirfd, name, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &st)
	return st, err
}

func ts(t unix.StatxTimestamp) time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }

// infoOf converts a statx result; created is the birth time when known.
func infoOf(rel string, st *unix.Statx_t) file.Info {
	mod := ts(st.Mtime)
	created := mod
	if st.Mask&unix.STATX_BTIME != 0 {
		created = ts(st.Btime)
	}
	return file.Info{
		Rel:      rel,
		Size:     int64(st.Size),
		Dir:      st.Mode&unix.S_IFMT == unix.S_IFDIR,
		Created:  created,
		Modified: mod,
		Changed:  ts(st.Ctime),
		Inode:    st.Ino,
	}
}

func fileType(st *unix.Statx_t) uint32 { return uint32(st.Mode) & unix.S_IFMT }

// joinRel joins a folder path within a mount with a name.
func joinRel(dir, name string) string {
	if dir == "" || dir == "." {
		return name
	}
	return dir + "/" + name
}
