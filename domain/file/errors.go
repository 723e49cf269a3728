package file

import (
	"errors"
	"time"
)

// The errors of file access. infra/fsroot returns them (wrapped); app and web
// map them to statuses.
var (
	ErrNotFound   = errors.New("file not found")
	ErrNotRegular = errors.New("not a regular file")
	ErrSymlink    = errors.New("symbolic link refused")
	ErrTooLarge   = errors.New("file exceeds the size limit")
	ErrReadOnly   = errors.New("read-only folder")
	ErrInvalidRel = errors.New("invalid path within mount")
	// ErrNotDir comes with ErrNotFound when a parent on the path is a file.
	ErrNotDir = errors.New("a path component is not a folder")
	// ErrDiskFull: the container's own disk (its quota) is full. It comes
	// with ErrTooLarge.
	ErrDiskFull = errors.New("the container's disk is full")
	// ErrServerDiskFull: the disk under the container's folders — the
	// server's — is full, whatever the container's quota leaves.
	ErrServerDiskFull = errors.New("the server's disk is full")
)

// Info describes one file (or folder) found within a mount.
type Info struct {
	Rel  string // slash-separated path within the mount
	Size int64
	// Holes is the bytes of a regular file's holes: its size less its
	// data, which a sandbox's `truncate -s 1T` makes at no cost to its
	// disk. Zero where the file has none, or where the lister does not
	// measure them (only the host's own listings do).
	Holes    int64
	Dir      bool
	Created  time.Time // birth time where the filesystem keeps it, else Modified
	Modified time.Time
	// Changed is the inode's status change time (ctime): every write,
	// truncation or touch moves it to now, and no call a sandbox can make
	// sets it back, as `touch -d` sets Modified. Zero where the lister does
	// not report it.
	Changed time.Time
	Inode   uint64
}

// Data returns the bytes of a regular file's data: Size less its Holes.
func (i Info) Data() int64 { return i.Size - i.Holes }
