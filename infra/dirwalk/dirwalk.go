// Package dirwalk walks and removes the trees of a container's folders
// by the folders it opened, never by path: code in the sandbox may swap a
// folder for a symbolic link to a host folder at any moment, and a walk
// or a removal that resolved a path after the swap would go through the
// link, outside the container's tree. Each folder is opened relative to
// the one that holds it with O_NOFOLLOW|O_DIRECTORY, and its entries are
// listed, stat'ed and removed through that descriptor.
package dirwalk

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Entry is what a walk found: a folder, regular file, symbolic link or
// other file.
type Entry struct {
	// Rel is the entry's slash-separated path below the walk's root
	// ("." for the root itself).
	Rel string
	// Stat is the entry's Lstat; a folder's is the Fstat of the folder
	// opened.
	Stat unix.Stat_t
	// Dir is the open folder that holds the entry (-1 for the root), valid
	// during the visit: Remove(ctx, e.Dir, e.Name) removes it there.
	Dir int
	// Name is the entry's name in Dir.
	Name string
}

// IsDir reports whether the entry is a folder.
func (e *Entry) IsDir() bool { return e.Stat.Mode&unix.S_IFMT == unix.S_IFDIR }

// Walker walks trees by the folders it opened.
type Walker struct {
	// BeforeDescend, when set, is called with each folder below the walk's
	// top that the walk found, before it opens it (tests swap the folder
	// for a link there).
	BeforeDescend func(rel string)
}

// Walk calls visit with every folder, regular file, symbolic link and
// other file at or below top, an entry of the folder root ("." for root
// itself), folders before what they hold, in lexical order. A visit of a
// folder that returns fs.SkipDir leaves out what the folder holds. It
// never goes through a symbolic link: a folder swapped for a link (or
// removed) since it was listed is left out, never followed. A top that
// does not exist is no error.
func (w Walker) Walk(ctx context.Context, root, top string, visit func(e *Entry) error) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(fd)
	if top == "." {
		e := Entry{Rel: ".", Dir: -1, Name: "."}
		if err := unix.Fstat(fd, &e.Stat); err != nil {
			return &fs.PathError{Op: "stat", Path: root, Err: err}
		}
		return w.folder(ctx, fd, &e, visit)
	}
	return w.walkAt(ctx, fd, top, top, visit)
}

// Walk is Walker{}.Walk.
func Walk(ctx context.Context, root, top string, visit func(e *Entry) error) error {
	return Walker{}.Walk(ctx, root, top, visit)
}

// walkAt walks the entry name of the open folder parent, rel below the
// walk's root.
func (w Walker) walkAt(ctx context.Context, parent int, name, rel string, visit func(e *Entry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(rel) > unix.PathMax {
		// As a walk by path would: it also bounds the folders held open.
		return &fs.PathError{Op: "lstat", Path: rel[:64] + "…", Err: unix.ENAMETOOLONG}
	}
	e := Entry{Rel: rel, Dir: parent, Name: name}
	if err := unix.Fstatat(parent, name, &e.Stat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed since it was listed
		}
		return &fs.PathError{Op: "lstat", Path: rel, Err: err}
	}
	if !e.IsDir() {
		return visit(&e)
	}
	if w.BeforeDescend != nil {
		w.BeforeDescend(rel)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil // removed or swapped since it was listed: a later walk sees what it is now
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &e.Stat); err != nil {
		return &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	return w.folder(ctx, fd, &e, visit)
}

// folder visits e, the folder open as fd, and then what it holds.
func (w Walker) folder(ctx context.Context, fd int, e *Entry, visit func(e *Entry) error) error {
	if err := visit(e); err != nil {
		if errors.Is(err, fs.SkipDir) {
			return nil
		}
		return err
	}
	names, err := Names(fd)
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: e.Rel, Err: err}
	}
	slices.Sort(names)
	for _, n := range names {
		rel := n
		if e.Rel != "." {
			rel = e.Rel + "/" + n
		}
		if err := w.walkAt(ctx, fd, n, rel, visit); err != nil {
			return err
		}
	}
	return nil
}

// Names returns the names of the entries of the folder open as fd, from
// its start, in the order the file system gives them.
func Names(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// Remove removes name from the folder dirfd, a folder with all it holds,
// never through a link; a missing one is not an error.
func Remove(ctx context.Context, dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		sub, oerr := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return oerr
		}
		err = Clear(ctx, sub)
		unix.Close(sub)
		if err == nil {
			err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		}
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// Clear removes every entry of the folder open as fd.
func Clear(ctx context.Context, fd int) error {
	names, err := Names(fd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := Remove(ctx, fd, name); err != nil {
			return err
		}
	}
	return nil
}
