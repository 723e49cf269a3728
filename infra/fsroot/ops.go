package fsroot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"threadbox/domain/file"
	"threadbox/infra/sparse"
)

// Open opens the regular file rel of mount m for reading. A symlink anywhere
// on the path fails with ErrSymlink; a folder, FIFO, socket or device fails
// with ErrNotRegular at once, without blocking.
func (f *FS) Open(ctx context.Context, m file.Mount, rel string) (*os.File, file.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, file.Info{}, err
	}
	parent, name, err := f.openParent(m, rel)
	if err != nil {
		return nil, file.Info{}, err
	}
	defer unix.Close(parent)
	// Refuse what is plainly not a regular file before opening it, so a
	// device node is never opened; the fstat below catches a swap since.
	if st, err := statxAt(parent, name); err != nil {
		return nil, file.Info{}, mapErrno("stat "+rel, err)
	} else if t := fileType(&st); t == unix.S_IFLNK {
		return nil, file.Info{}, fmt.Errorf("fsroot: open %s: %w", rel, ErrSymlink)
	} else if t != unix.S_IFREG {
		return nil, file.Info{}, fmt.Errorf("fsroot: open %s: %w", rel, ErrNotRegular)
	}
	// O_NONBLOCK: opening a FIFO with no writer must not hang; cleared below.
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, file.Info{}, mapErrno("open "+rel, err)
	}
	st, err := statxAt(fd, "")
	if err != nil {
		unix.Close(fd)
		return nil, file.Info{}, mapErrno("stat "+rel, err)
	}
	if fileType(&st) != unix.S_IFREG {
		unix.Close(fd)
		return nil, file.Info{}, fmt.Errorf("fsroot: open %s: %w", rel, ErrNotRegular)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, file.Info{}, fmt.Errorf("fsroot: open %s: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), rel), infoOf(rel, &st), nil
}

// Stat describes the regular file or folder rel of mount m ("." is the
// mount's folder). Symlinks fail with ErrSymlink, other kinds with
// ErrNotRegular.
func (f *FS) Stat(ctx context.Context, m file.Mount, rel string) (file.Info, error) {
	if err := ctx.Err(); err != nil {
		return file.Info{}, err
	}
	comps, err := splitRel(rel)
	if err != nil {
		return file.Info{}, err
	}
	root, err := f.openMount(m)
	if err != nil {
		return file.Info{}, err
	}
	defer unix.Close(root)
	var st unix.Statx_t
	if len(comps) == 0 {
		st, err = statxAt(root, "")
		rel = "."
	} else {
		var parent int
		parent, err = f.openDir(root, comps[:len(comps)-1])
		if err != nil {
			return file.Info{}, err
		}
		st, err = statxAt(parent, comps[len(comps)-1])
		unix.Close(parent)
	}
	if err != nil {
		return file.Info{}, mapErrno("stat "+rel, err)
	}
	switch fileType(&st) {
	case unix.S_IFREG, unix.S_IFDIR:
		return infoOf(rel, &st), nil
	case unix.S_IFLNK:
		return file.Info{}, fmt.Errorf("fsroot: stat %s: %w", rel, ErrSymlink)
	}
	return file.Info{}, fmt.Errorf("fsroot: stat %s: %w", rel, ErrNotRegular)
}

// ReadDir lists the regular files and folders directly in folder rel of
// mount m, sorted by name. Symlinks and special files are left out.
func (f *FS) ReadDir(ctx context.Context, m file.Mount, rel string) ([]file.Info, error) {
	var out []file.Info
	err := f.walk(ctx, m, rel, 1, func(info file.Info, _ int) error {
		out = append(out, info)
		return nil
	}, nil)
	return out, err
}

// List returns every regular file under folder rel of mount m ("." for the
// whole mount), recursively, without following symlinks and at most
// MaxDepth folders deep. Rel fields are relative to the mount.
func (f *FS) List(ctx context.Context, m file.Mount, rel string) ([]file.Info, error) {
	var out []file.Info
	err := f.walk(ctx, m, rel, MaxDepth, func(info file.Info, _ int) error {
		if !info.Dir {
			out = append(out, info)
		}
		return nil
	}, nil)
	return out, err
}

// visitFunc sees each regular file or folder; dirfd is its parent folder.
type visitFunc func(info file.Info, dirfd int) error

// walk calls visit for the regular files and folders under folder rel, in
// name order, descending depth levels; after a folder's contents, leave is
// called for it (when not nil).
func (f *FS) walk(ctx context.Context, m file.Mount, rel string, depth int, visit, leave visitFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	comps, err := splitRel(rel)
	if err != nil {
		return err
	}
	root, err := f.openMount(m)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, err := f.openDir(root, comps)
	if err != nil {
		return err
	}
	count := 0
	return f.walkDir(ctx, dir, strings.Join(comps, "/"), depth, &count, visit, leave)
}

// walkDir walks the open folder dir (and closes it).
func (f *FS) walkDir(ctx context.Context, dir int, rel string, depth int, count *int, visit, leave visitFunc) error {
	d := os.NewFile(uintptr(dir), rel)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("fsroot: read folder %q: %w", rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(name, tempPrefix) {
			continue
		}
		st, err := statxAt(dir, name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return mapErrno("stat "+joinRel(rel, name), err)
		}
		t := fileType(&st)
		if t != unix.S_IFREG && t != unix.S_IFDIR {
			continue
		}
		if *count++; *count > MaxEntries {
			return fmt.Errorf("fsroot: more than %d entries: %w", MaxEntries, ErrTooLarge)
		}
		info := infoOf(joinRel(rel, name), &st)
		if t == unix.S_IFREG {
			if info.Holes, err = holes(dir, name, &st); err != nil {
				return mapErrno("measure "+info.Rel, err)
			}
		}
		if err := visit(info, dir); err != nil {
			return err
		}
		if t != unix.S_IFDIR || depth <= 1 {
			continue
		}
		sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				continue // swapped or removed meanwhile: never followed
			}
			return mapErrno("open "+info.Rel, err)
		}
		if err := f.walkDir(ctx, sub, info.Rel, depth-1, count, visit, leave); err != nil {
			return err
		}
		if leave != nil {
			if err := leave(info, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// holes returns the bytes of the holes of the regular file name under
// dir, whose statx is st: none when its blocks cover its size, else its
// size less its data extents (sparse.DataBytes) as the file opened (never
// through a link) has them. A file that is no longer a regular file, or
// no longer there, has none.
func holes(dir int, name string, st *unix.Statx_t) (int64, error) {
	if int64(st.Blocks)*512 >= int64(st.Size) {
		return 0, nil
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
		return 0, nil // removed or swapped meanwhile
	}
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	now, err := statxAt(fd, "")
	if err != nil || fileType(&now) != unix.S_IFREG {
		return 0, err
	}
	size := min(int64(st.Size), int64(now.Size))
	data, err := sparse.DataBytes(f, size)
	if err != nil {
		return 0, err
	}
	return max(int64(st.Size)-data, 0), nil
}

// Write stores what r yields at rel in mount m atomically: parents are
// created, the bytes go to a temporary file in the same folder, which is
// synced and renamed over rel, and the folder is synced. More than limit
// bytes (limit < 0: no limit) fail with ErrTooLarge and leave rel as it was.
// A symlink at rel is replaced, never followed; a symlink among the parents
// fails with ErrSymlink. The skills mount is read-only (ErrReadOnly).
func (f *FS) Write(ctx context.Context, m file.Mount, rel string, r io.Reader, limit int64) (file.Info, error) {
	return f.replace(ctx, m, rel, func(out *os.File) error {
		var src io.Reader = &ctxReader{ctx: ctx, r: r}
		if limit >= 0 {
			src = io.LimitReader(src, limit+1)
		}
		n, err := copyLarge(out, src)
		if err != nil {
			return f.diskFullErr("write "+rel, int(out.Fd()), err)
		}
		if limit >= 0 && n > limit {
			return fmt.Errorf("fsroot: write %s: more than %d bytes: %w", rel, limit, ErrTooLarge)
		}
		return nil
	})
}

// WriteData stores the first size bytes of src at rel in mount m as Write
// does, by their data alone: each data extent of src is written where it
// lies and the holes between stay holes, so a sparse file of terabytes
// costs the disk its few written blocks. More than limit bytes of data
// (limit < 0: no limit) fail with ErrTooLarge and leave rel as it was.
// It returns the file written and the bytes of data it holds.
func (f *FS) WriteData(ctx context.Context, m file.Mount, rel string, src *os.File, size, limit int64) (file.Info, int64, error) {
	var data int64
	info, err := f.replace(ctx, m, rel, func(out *os.File) error {
		buf := make([]byte, copyBufferSize)
		err := sparse.DataExtents(src, size, func(off, n int64) error {
			if data += n; limit >= 0 && data > limit {
				return fmt.Errorf("fsroot: write %s: more than %d bytes of data: %w", rel, limit, ErrTooLarge)
			}
			in := &ctxReader{ctx: ctx, r: io.NewSectionReader(src, off, n)}
			_, err := io.CopyBuffer(io.NewOffsetWriter(out, off), in, buf)
			if err != nil {
				return f.diskFullErr("write "+rel, int(out.Fd()), err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// The holes up to the size read as zeros, as they did in src.
		if err := out.Truncate(size); err != nil {
			return f.diskFullErr("write "+rel, int(out.Fd()), err)
		}
		return nil
	})
	return info, data, err
}

// WriteExtents stores at rel in mount m, as Write does, the file of size
// bytes whose extent stream (infra/sparse) r yields: each data extent is
// written where it lies and the file is then given its size, so the holes
// stay holes and cost the disk nothing. r must end with the stream's final
// extent. More than limit bytes of data (limit < 0: no limit) fail with
// ErrTooLarge and leave rel as it was. It returns the file written and the
// bytes of data it holds.
func (f *FS) WriteExtents(ctx context.Context, m file.Mount, rel string, r io.Reader, size, limit int64) (file.Info, int64, error) {
	if size < 0 {
		return file.Info{}, 0, fmt.Errorf("fsroot: write %s: size %d", rel, size)
	}
	var data int64
	info, err := f.replace(ctx, m, rel, func(out *os.File) error {
		to := &extentWriter{f: f, out: out, rel: rel, limit: limit}
		in := &ctxReader{ctx: ctx, r: r}
		err := sparse.Read(in, size, to)
		data = to.data
		if to.err != nil {
			return to.err
		}
		if err != nil {
			return fmt.Errorf("fsroot: write %s: %w", rel, err)
		}
		// Nothing may follow the final extent: reading on to r's end
		// tells a complete stream from one whose sender failed after it.
		if n, err := io.Copy(io.Discard, in); err != nil {
			return fmt.Errorf("fsroot: write %s: %w", rel, err)
		} else if n > 0 {
			return fmt.Errorf("fsroot: write %s: %d bytes after the final extent", rel, n)
		}
		// The holes up to the size read as zeros.
		if err := out.Truncate(size); err != nil {
			return f.diskFullErr("write "+rel, int(out.Fd()), err)
		}
		return nil
	})
	return info, data, err
}

// extentWriter writes the data extents of WriteExtents into out, counting
// them against limit; err keeps the failure it returned, so the caller
// reports it as fsroot's own error.
type extentWriter struct {
	f     *FS
	out   *os.File
	rel   string
	limit int64
	data  int64
	err   error
}

func (w *extentWriter) WriteAt(p []byte, off int64) (int, error) {
	if w.limit >= 0 && w.data+int64(len(p)) > w.limit {
		w.err = fmt.Errorf("fsroot: write %s: more than %d bytes of data: %w", w.rel, w.limit, ErrTooLarge)
		return 0, w.err
	}
	n, err := w.out.WriteAt(p, off)
	w.data += int64(n)
	if err != nil {
		w.err = w.f.diskFullErr("write "+w.rel, int(w.out.Fd()), err)
		return n, w.err
	}
	return n, nil
}

// replace makes rel in mount m what fill writes into a new temporary file
// beside it, atomically, as Write describes; a fill that fails leaves rel
// as it was.
func (f *FS) replace(ctx context.Context, m file.Mount, rel string, fill func(out *os.File) error) (file.Info, error) {
	if err := ctx.Err(); err != nil {
		return file.Info{}, err
	}
	if m == file.Skills {
		return file.Info{}, fmt.Errorf("fsroot: write %s: %w", rel, ErrReadOnly)
	}
	comps, err := splitRel(rel)
	if err != nil {
		return file.Info{}, err
	}
	if len(comps) == 0 {
		return file.Info{}, fmt.Errorf("fsroot: write the mount folder: %w", ErrNotRegular)
	}
	root, err := f.openMount(m)
	if err != nil {
		return file.Info{}, err
	}
	defer unix.Close(root)
	parent, err := f.mkdirAll(root, comps[:len(comps)-1])
	if err != nil {
		return file.Info{}, err
	}
	defer unix.Close(parent)
	name := comps[len(comps)-1]

	tmp, err := tempName()
	if err != nil {
		return file.Info{}, err
	}
	fd, err := unix.Openat(parent, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return file.Info{}, mapErrno("create "+rel, err)
	}
	out := os.NewFile(uintptr(fd), tmp)
	committed := false
	defer func() {
		if !committed {
			out.Close()
			_ = unix.Unlinkat(parent, tmp, 0)
		}
	}()
	if err := fill(out); err != nil {
		return file.Info{}, err
	}
	if o := f.opts.Owner; o != nil {
		if err := unix.Fchown(fd, o.UID, o.GID); err != nil {
			return file.Info{}, fmt.Errorf("fsroot: chown %s: %w", rel, err)
		}
	}
	if err := out.Sync(); err != nil {
		return file.Info{}, f.diskFullErr("sync "+rel, fd, err)
	}
	if err := out.Close(); err != nil {
		return file.Info{}, mapErrno("close "+rel, err)
	}
	if err := unix.Renameat2(parent, tmp, parent, name, 0); err != nil {
		return file.Info{}, mapErrno("rename "+rel, err)
	}
	committed = true
	if err := f.syncFD(parent); err != nil {
		return file.Info{}, fmt.Errorf("fsroot: sync folder of %s: %w", rel, err)
	}
	st, err := statxAt(parent, name)
	if err != nil {
		return file.Info{}, mapErrno("stat "+rel, err)
	}
	return infoOf(rel, &st), nil
}

// mkdirAll opens (creating as needed) the folder comps beneath root without
// following symlinks, and returns its descriptor.
func (f *FS) mkdirAll(root int, comps []string) (int, error) {
	cur, err := unix.Dup(root)
	if err != nil {
		return -1, fmt.Errorf("fsroot: dup: %w", err)
	}
	unix.CloseOnExec(cur)
	for i, c := range comps {
		created := false
		if err := unix.Mkdirat(cur, c, 0o755); err == nil {
			created = true
		} else if !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, mapErrno("mkdir "+strings.Join(comps[:i+1], "/"), err)
		}
		if created && f.opts.Owner != nil {
			if err := unix.Fchownat(cur, c, f.opts.Owner.UID, f.opts.Owner.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				unix.Close(cur)
				return -1, fmt.Errorf("fsroot: chown %s: %w", strings.Join(comps[:i+1], "/"), err)
			}
		}
		next, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			err = componentErr(cur, c, strings.Join(comps[:i+1], "/"), err)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func tempName() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fsroot: temp name: %w", err)
	}
	return tempPrefix + hex.EncodeToString(b[:]), nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Remove deletes the file rel of mount m: a regular file, or a symlink or
// special file (the link itself, never its target). Folders fail with
// ErrNotRegular; the skills mount is read-only.
func (f *FS) Remove(ctx context.Context, m file.Mount, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m == file.Skills {
		return fmt.Errorf("fsroot: remove %s: %w", rel, ErrReadOnly)
	}
	parent, name, err := f.openParent(m, rel)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	// unlinkat without AT_REMOVEDIR refuses a folder with EISDIR.
	if err := unix.Unlinkat(parent, name, 0); err != nil {
		return mapErrno("remove "+rel, err)
	}
	if err := f.syncFD(parent); err != nil {
		return fmt.Errorf("fsroot: sync folder of %s: %w", rel, err)
	}
	return nil
}

// RemovePrefix deletes every regular file of mount m whose path within the
// mount starts with prefix (a plain string prefix: "data/20" matches
// "data/2026/a.csv" and "data/20.txt"), then the folders under the prefix
// left empty. It returns how many files it deleted.
func (f *FS) RemovePrefix(ctx context.Context, m file.Mount, prefix string) (int, error) {
	if m == file.Skills {
		return 0, fmt.Errorf("fsroot: remove %s*: %w", prefix, ErrReadOnly)
	}
	if prefix == "" {
		return 0, fmt.Errorf("fsroot: remove: empty prefix: %w", ErrInvalidRel)
	}
	// Walk from the deepest folder the prefix fully names.
	dir := "."
	if i := strings.LastIndexByte(prefix, '/'); i > 0 {
		dir = prefix[:i]
	}
	removed := 0
	touched := map[string]struct{}{} // the folders that lost an entry
	err := f.walk(ctx, m, dir, MaxDepth, func(info file.Info, parent int) error {
		if info.Dir || !strings.HasPrefix(info.Rel, prefix) {
			return nil
		}
		if err := unix.Unlinkat(parent, baseName(info.Rel), 0); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return mapErrno("remove "+info.Rel, err)
		}
		removed++
		touched[dirName(info.Rel)] = struct{}{}
		return nil
	}, func(info file.Info, parent int) error {
		if strings.HasPrefix(info.Rel+"/", prefix) {
			// Only if empty.
			if unix.Unlinkat(parent, baseName(info.Rel), unix.AT_REMOVEDIR) == nil {
				touched[dirName(info.Rel)] = struct{}{}
			}
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) && removed == 0 {
		return 0, nil
	}
	if err != nil {
		return removed, err
	}
	if dir != "." && strings.HasPrefix(dir+"/", prefix) {
		if parent, name, err := f.openParent(m, dir); err == nil {
			if unix.Unlinkat(parent, name, unix.AT_REMOVEDIR) == nil { // only if empty
				touched[dirName(dir)] = struct{}{}
			}
			unix.Close(parent)
		}
	}
	// Each folder that lost an entry is synced once, not the file system.
	if len(touched) > 0 {
		root, err := f.openMount(m)
		if err != nil {
			return removed, err
		}
		defer unix.Close(root)
		for _, rel := range slices.Sorted(maps.Keys(touched)) {
			comps, _ := splitRel(rel)
			fd, err := f.openDir(root, comps)
			if errors.Is(err, ErrNotFound) {
				continue // removed itself: its parent is in the set
			}
			if err != nil {
				return removed, err
			}
			err = f.syncFD(fd)
			unix.Close(fd)
			if err != nil {
				return removed, fmt.Errorf("fsroot: sync %s after removing %s*: %w", rel, prefix, err)
			}
		}
	}
	return removed, nil
}

// SyncFile makes the regular file rel of mount m durable: its content, its
// entry in its folder, and the entries of the folders above it up to the
// mount's folder (code may have just made them). It syncs nothing else, so
// a call waits only for what this container wrote to that file, never for
// other tenants' writes to a disk they share. A symlink anywhere on the
// path fails with ErrSymlink, a folder or special file with ErrNotRegular.
func (f *FS) SyncFile(ctx context.Context, m file.Mount, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	comps, err := splitRel(rel)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return fmt.Errorf("fsroot: sync the mount folder: %w", ErrNotRegular)
	}
	root, err := f.openMount(m)
	if err != nil {
		return err
	}
	dirs := []int{root}
	defer func() {
		for _, fd := range dirs {
			unix.Close(fd)
		}
	}()
	for i, c := range comps[:len(comps)-1] {
		fd, err := unix.Openat(dirs[i], c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return componentErr(dirs[i], c, strings.Join(comps[:i+1], "/"), err)
		}
		dirs = append(dirs, fd)
	}
	parent, name := dirs[len(dirs)-1], comps[len(comps)-1]
	if st, err := statxAt(parent, name); err != nil {
		return mapErrno("stat "+rel, err)
	} else if t := fileType(&st); t == unix.S_IFLNK {
		return fmt.Errorf("fsroot: sync %s: %w", rel, ErrSymlink)
	} else if t != unix.S_IFREG {
		return fmt.Errorf("fsroot: sync %s: %w", rel, ErrNotRegular)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return mapErrno("open "+rel, err)
	}
	defer unix.Close(fd)
	if st, err := statxAt(fd, ""); err != nil {
		return mapErrno("stat "+rel, err)
	} else if fileType(&st) != unix.S_IFREG {
		return fmt.Errorf("fsroot: sync %s: %w", rel, ErrNotRegular)
	}
	if err := f.syncFD(fd); err != nil {
		return f.diskFullErr("sync "+rel, fd, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := f.syncFD(dirs[i]); err != nil {
			return fmt.Errorf("fsroot: sync the folders of %s: %w", rel, err)
		}
	}
	return nil
}

func baseName(rel string) string {
	return rel[strings.LastIndexByte(rel, '/')+1:]
}

// dirName is the folder holding rel within its mount ("." for the mount's
// own folder).
func dirName(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i > 0 {
		return rel[:i]
	}
	return "."
}

// ReadFile returns the whole regular file rel of mount m; files larger than
// max bytes fail with ErrTooLarge.
func (f *FS) ReadFile(ctx context.Context, m file.Mount, rel string, max int64) ([]byte, error) {
	fh, info, err := f.Open(ctx, m, rel)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if info.Size > max {
		return nil, fmt.Errorf("fsroot: read %s: %d bytes: %w", rel, info.Size, ErrTooLarge)
	}
	var buf bytes.Buffer
	buf.Grow(int(info.Size))
	n, err := buf.ReadFrom(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, fmt.Errorf("fsroot: read %s: %w", rel, err)
	}
	if n > max {
		return nil, fmt.Errorf("fsroot: read %s: %w", rel, ErrTooLarge)
	}
	return buf.Bytes(), nil
}

// WriteFile stores data at rel in mount m, atomically, as Write does.
func (f *FS) WriteFile(ctx context.Context, m file.Mount, rel string, data []byte) (file.Info, error) {
	return f.Write(ctx, m, rel, bytes.NewReader(data), int64(len(data)))
}

// copyBufferSize is the size of the reads and writes of a file upload:
// io.Copy's 32 KiB would mean eight times as many system calls.
const copyBufferSize = 256 << 10

// copyLarge copies src to out in copyBufferSize steps through two buffers:
// one is filled from src while the other is written to out, so reading the
// request and writing the file overlap even on one scheduler thread (a
// goroutine in a write system call leaves the thread to the reader).
func copyLarge(out *os.File, src io.Reader) (int64, error) {
	type chunk struct {
		b []byte
		n int
	}
	free := make(chan []byte, 2)
	free <- make([]byte, copyBufferSize)
	free <- make([]byte, copyBufferSize)
	full := make(chan chunk, 1)
	werr := make(chan error, 1)
	failed := make(chan struct{}) // closed when a write fails: stop reading
	go func() {
		var err error
		for c := range full {
			if err == nil {
				if _, err = out.Write(c.b[:c.n]); err != nil {
					close(failed)
				}
			}
			free <- c.b
		}
		werr <- err
	}()
	var total int64
	var rerr error
	for {
		var b []byte
		select {
		case b = <-free:
		case <-failed:
		}
		if b == nil {
			break
		}
		n, err := io.ReadFull(src, b)
		if n > 0 {
			full <- chunk{b, n}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	close(full)
	if err := <-werr; err != nil {
		return total, err
	}
	return total, rerr
}
