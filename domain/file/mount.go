package file

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"threadbox/domain/sandbox"
)

// Mount names one of the sandbox's file folders (docs/api.md). The names
// double as the folders' names on the host.
type Mount string

// The sandbox's mounts.
const (
	Workspace Mount = "workspace"
	Uploads   Mount = "uploads"
	Outputs   Mount = "outputs"
	Skills    Mount = "skills"
)

// Access says whether code inside the sandbox may write into a mount.
type Access int

// The access modes of a mount.
const (
	ReadOnly Access = iota + 1
	ReadWrite
)

// String returns "ro" or "rw".
func (a Access) String() string {
	switch a {
	case ReadOnly:
		return "ro"
	case ReadWrite:
		return "rw"
	}
	return "none"
}

// MountPoint places a mount at an absolute sandbox path.
type MountPoint struct {
	Mount  Mount
	Path   string // absolute, clean sandbox path
	Access Access
}

// Table is a sandbox's mount table.
type Table []MountPoint

// DefaultTable returns the mount table of every sandbox (docs/api.md).
func DefaultTable() Table {
	return Table{
		{Mount: Workspace, Path: sandbox.WorkspaceDir, Access: ReadWrite},
		{Mount: Uploads, Path: sandbox.UploadsDir, Access: ReadOnly},
		{Mount: Outputs, Path: sandbox.OutputsDir, Access: ReadWrite},
		{Mount: Skills, Path: sandbox.SkillsDir, Access: ReadOnly},
	}
}

// Location is where a sandbox path lives: its mount and its path within it.
type Location struct {
	Mount  Mount
	Rel    string // slash-separated, relative to the mount; "." for the mount itself
	Access Access
	Path   string // the clean absolute sandbox path
}

// The reasons a path cannot be used.
var (
	ErrReadOnlyMount = errors.New("read-only mount")
	ErrNoMount       = errors.New("no matching mount")
)

// MountError reports a path refused by the mount table. Its message is the
// exact string the code-execution tools answer (docs/api.md). Path is the path as the caller gave it, not
// the resolved one: that is what the Anthropic API shows, and it is what the
// model or user typed.
type MountError struct {
	Path string
	Err  error // ErrReadOnlyMount or ErrNoMount
}

// Error returns the contract's message.
func (e *MountError) Error() string {
	if errors.Is(e.Err, ErrReadOnlyMount) {
		return fmt.Sprintf("Path '%s' is in a read-only mount", e.Path)
	}
	return fmt.Sprintf("Path '%s' does not match any session mount", e.Path)
}

// Unwrap returns ErrReadOnlyMount or ErrNoMount.
func (e *MountError) Unwrap() error { return e.Err }

// Resolve finds the mount of a sandbox path, absolute or relative to the
// workspace. Paths are cleaned lexically first, so "/mnt/user-data/outputs/../x"
// is "/mnt/user-data/x", which matches no mount.
func (t Table) Resolve(p string) (Location, error) {
	if p == "" || len(p) > MaxPathLen || strings.IndexByte(p, 0) >= 0 {
		return Location{}, &MountError{Path: p, Err: ErrNoMount}
	}
	abs := p
	if !path.IsAbs(abs) {
		abs = sandbox.WorkspaceDir + "/" + abs
	}
	abs = path.Clean(abs)
	for _, mp := range t {
		if abs == mp.Path {
			return Location{Mount: mp.Mount, Rel: ".", Access: mp.Access, Path: abs}, nil
		}
		if rel, ok := strings.CutPrefix(abs, mp.Path+"/"); ok {
			return Location{Mount: mp.Mount, Rel: rel, Access: mp.Access, Path: abs}, nil
		}
	}
	return Location{}, &MountError{Path: p, Err: ErrNoMount}
}

// ResolveWrite is Resolve for a write from inside the sandbox: a path in a
// read-only mount is refused with ErrReadOnlyMount.
func (t Table) ResolveWrite(p string) (Location, error) {
	loc, err := t.Resolve(p)
	if err != nil {
		return Location{}, err
	}
	if loc.Access != ReadWrite {
		return Location{}, &MountError{Path: p, Err: ErrReadOnlyMount}
	}
	return loc, nil
}

// Path returns the absolute sandbox path of rel within mount m, and false
// when the table has no such mount.
func (t Table) Path(m Mount, rel string) (string, bool) {
	for _, mp := range t {
		if mp.Mount == m {
			if rel == "" || rel == "." {
				return mp.Path, true
			}
			return path.Join(mp.Path, rel), true
		}
	}
	return "", false
}
