package fsroot

import (
	"context"
	"fmt"
	"io"

	"threadbox/domain/file"
)

// Containers gives confined access to the files of any container, addressed
// by container id and sandbox path. It serves the file ports of app/tools and
// app/files. Paths are placed with the sandbox's mount table; it does
// not apply the sandbox's read-only rule (the host writes uploads), only the
// skills folder is never written.
type Containers struct {
	dirs  func(containerID string) Dirs
	table file.Table
	opts  Options
}

// NewContainers returns the access for the containers whose host folders
// dirs names.
func NewContainers(dirs func(containerID string) Dirs, opts Options) *Containers {
	return &Containers{dirs: dirs, table: file.DefaultTable(), opts: opts}
}

// FS returns the confined access to one container's folders.
func (c *Containers) FS(containerID string) *FS {
	return New(c.dirs(containerID), c.opts)
}

func (c *Containers) locate(containerID, sandboxPath string) (*FS, file.Location, error) {
	loc, err := c.table.Resolve(sandboxPath)
	if err != nil {
		return nil, file.Location{}, fmt.Errorf("fsroot: %w", err)
	}
	return c.FS(containerID), loc, nil
}

// ReadFile returns the whole regular file at sandboxPath; a file larger than
// limit bytes fails with ErrTooLarge.
func (c *Containers) ReadFile(ctx context.Context, containerID, sandboxPath string, limit int64) ([]byte, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return nil, err
	}
	return fs.ReadFile(ctx, loc.Mount, loc.Rel, limit)
}

// WriteFile creates or replaces the file at sandboxPath atomically, creating
// missing parents.
func (c *Containers) WriteFile(ctx context.Context, containerID, sandboxPath string, data []byte) error {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return err
	}
	_, err = fs.WriteFile(ctx, loc.Mount, loc.Rel, data)
	return err
}

// Stat describes the regular file or folder at sandboxPath. Info.Rel is
// relative to its mount.
func (c *Containers) Stat(ctx context.Context, containerID, sandboxPath string) (file.Info, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return file.Info{}, err
	}
	return fs.Stat(ctx, loc.Mount, loc.Rel)
}

// List returns the regular files and folders directly inside the folder at
// sandboxPath.
func (c *Containers) List(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return nil, err
	}
	return fs.ReadDir(ctx, loc.Mount, loc.Rel)
}

// Walk returns every regular file under the folder at sandboxPath,
// recursively. Info.Rel is relative to the folder's mount.
func (c *Containers) Walk(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return nil, err
	}
	return fs.List(ctx, loc.Mount, loc.Rel)
}

// SyncFile makes the regular file at sandboxPath durable, with the folder
// entries that lead to it (FS.SyncFile).
func (c *Containers) SyncFile(ctx context.Context, containerID, sandboxPath string) error {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return err
	}
	return fs.SyncFile(ctx, loc.Mount, loc.Rel)
}

// Open opens the regular file at sandboxPath for reading.
func (c *Containers) Open(ctx context.Context, containerID, sandboxPath string) (io.ReadSeekCloser, file.Info, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return nil, file.Info{}, err
	}
	f, info, err := fs.Open(ctx, loc.Mount, loc.Rel)
	if err != nil {
		return nil, file.Info{}, err
	}
	return f, info, nil
}

// Write stores r at sandboxPath atomically, at most limit bytes (limit < 0:
// no limit), creating missing parents.
func (c *Containers) Write(ctx context.Context, containerID, sandboxPath string, r io.Reader, limit int64) (file.Info, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return file.Info{}, err
	}
	return fs.Write(ctx, loc.Mount, loc.Rel, r, limit)
}

// CopyFile copies the regular file at sandboxPath of container from to the
// same path of container to, atomically, by its data alone: its holes stay
// holes (FS.WriteData), so a file of 1 TiB made by `truncate -s 1T` costs
// the copy its written blocks. More than limit bytes of data (limit < 0:
// no limit) fail with ErrTooLarge. It returns the copy and the bytes of
// data it holds.
func (c *Containers) CopyFile(ctx context.Context, from, to, sandboxPath string, limit int64) (file.Info, int64, error) {
	src, loc, err := c.locate(from, sandboxPath)
	if err != nil {
		return file.Info{}, 0, err
	}
	in, info, err := src.Open(ctx, loc.Mount, loc.Rel)
	if err != nil {
		return file.Info{}, 0, err
	}
	defer in.Close()
	return c.FS(to).WriteData(ctx, loc.Mount, loc.Rel, in, info.Size, limit)
}

// WriteExtents stores at sandboxPath atomically the file of size bytes
// whose extent stream (infra/sparse) r yields, its holes kept
// (FS.WriteExtents), creating missing parents. More than limit bytes of
// data (limit < 0: no limit) fail with ErrTooLarge. It returns the file
// written and the bytes of data it holds.
func (c *Containers) WriteExtents(ctx context.Context, containerID, sandboxPath string, r io.Reader, size, limit int64) (file.Info, int64, error) {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return file.Info{}, 0, err
	}
	return fs.WriteExtents(ctx, loc.Mount, loc.Rel, r, size, limit)
}

// Remove deletes the file at sandboxPath (a symlink itself, never its
// target).
func (c *Containers) Remove(ctx context.Context, containerID, sandboxPath string) error {
	fs, loc, err := c.locate(containerID, sandboxPath)
	if err != nil {
		return err
	}
	return fs.Remove(ctx, loc.Mount, loc.Rel)
}

// RemovePrefix deletes the regular files of mount m whose path within the
// mount starts with prefix, and returns how many.
func (c *Containers) RemovePrefix(ctx context.Context, containerID string, m file.Mount, prefix string) (int, error) {
	return c.FS(containerID).RemovePrefix(ctx, m, prefix)
}
