package snapshot

import (
	"slices"
	"strings"

	"threadbox/domain/fault"
)

// File is one file of a snapshot, or of a container's folders: a regular
// file (its size, permission bits and the digest of its content: its
// SHA-256, or one of its data for a file with holes, marked so that the
// two kinds never compare as equal) or a symbolic link (Link, its target).
type File struct {
	Size   int64
	Mode   uint32
	SHA256 string
	Link   string
}

// Same tells whether two files hold the same thing: content, link target
// and permission bits (a modification time alone is no change).
func (f File) Same(g File) bool {
	return f.Link == g.Link && f.SHA256 == g.SHA256 && f.Size == g.Size && f.Mode == g.Mode
}

// Change ops.
const (
	Created = "created"
	Changed = "changed"
	Deleted = "deleted"
)

// Change is what happened to one path between two snapshots: Before is
// nil for a created file, After for a deleted one.
type Change struct {
	Path   string // under the snapshot: "workspace/a/b.txt"
	Op     string
	Before *File
	After  *File
}

// Diff lists the changes from before to after, by path.
func Diff(before, after map[string]File) []Change {
	var out []Change
	for p, a := range after {
		a := a
		if b, ok := before[p]; !ok {
			out = append(out, Change{Path: p, Op: Created, After: &a})
		} else if !b.Same(a) {
			out = append(out, Change{Path: p, Op: Changed, Before: &b, After: &a})
		}
	}
	for p, b := range before {
		b := b
		if _, ok := after[p]; !ok {
			out = append(out, Change{Path: p, Op: Deleted, Before: &b})
		}
	}
	slices.SortFunc(out, func(x, y Change) int { return strings.Compare(x.Path, y.Path) })
	return out
}

// Folders are the container folders a snapshot holds, by their names
// under the container's root.
var Folders = []string{"workspace", "uploads", "outputs"}

// CheckPath refuses a path that is not a clean relative path inside one
// of Folders ("workspace/a.txt").
func CheckPath(p string) error {
	parts := strings.Split(p, "/")
	if len(parts) < 2 || !slices.Contains(Folders, parts[0]) {
		return fault.Errorf(fault.Invalid, "path %q: not under %s", p, strings.Join(Folders, ", "))
	}
	for _, part := range parts[1:] {
		if part == "" || part == "." || part == ".." {
			return fault.Errorf(fault.Invalid, "path %q: not a clean relative path", p)
		}
	}
	return nil
}

// Touched returns the paths among changes whose file in later differs
// from what the change left (After; absent for a deletion).
func Touched(changes []Change, later map[string]File) []string {
	var out []string
	for _, c := range changes {
		l, ok := later[c.Path]
		switch {
		case c.After == nil && ok, c.After != nil && !ok, c.After != nil && ok && !c.After.Same(l):
			out = append(out, c.Path)
		}
	}
	return out
}
