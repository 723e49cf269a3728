//go:build linux

package slot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"threadbox/infra/sandbox/hostdirs"
)

// Make creates the slot dir with n empty subfolders and makes it a shared
// mount, so that mounts made later under it propagate to the sandboxes
// that bind its subfolders with rslave propagation.
func Make(dir string, n int) error {
	if err := MakeShared(dir); err != nil {
		return err
	}
	for i := range n {
		if err := os.Mkdir(Path(dir, i), 0o755); err != nil {
			_ = Remove(dir)
			return fmt.Errorf("slot: %w", err)
		}
	}
	return nil
}

// Bind mounts the host folder src (recursively, read-only when asked) on
// the slot's subfolder i. The mount is made read-only before it is
// attached, so the copies propagated into a sandbox are read-only too (a
// bind remounted read-only afterwards would propagate writable).
func Bind(dir string, i int, src string, readOnly bool) error {
	return BindAt(Path(dir, i), src, readOnly)
}

// BindAt mounts the host folder src (recursively, read-only when asked) on
// dst, a folder under a slot, as Bind does.
func BindAt(dst, src string, readOnly bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("slot: open %s: %w", src, err)
	}
	defer unix.Close(fd)
	if readOnly {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("slot: read-only %s: %w", src, err)
		}
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("slot: mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// Remove unmounts everything under the slot dir and the slot itself
// (lazily: a sandbox still holding its copies keeps them until it ends)
// and deletes the folder. A missing slot is no error.
func Remove(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	subs, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, p := range append(subs, dir) {
		for unix.Unmount(p, unix.MNT_DETACH) == nil {
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("slot: remove %s: %w", dir, err)
	}
	return nil
}

// Clean removes every slot under root (left by an earlier process).
func Clean(root string) error {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, Remove(filepath.Join(root, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// MakeShared creates the folder dir and makes it a shared mount (bound
// onto itself), as Make does, without subfolders.
func MakeShared(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(dir)
		return fmt.Errorf("slot: bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		_ = RemoveTree(dir)
		return fmt.Errorf("slot: make %s shared: %w", dir, err)
	}
	return nil
}

// ReadOnly makes the mount at dir (made by MakeShared) read-only; the
// mounts under it keep their own flags.
func ReadOnly(dir string) error {
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("slot: read-only %s: %w", dir, err)
	}
	return nil
}

// RemoveTree unmounts every mount at or under dir, deepest first (lazily:
// a sandbox still holding copies keeps them until it ends), and deletes
// the folder. While a mount is left under dir it deletes nothing: a folder
// bound there is a container's. A missing dir is no error.
func RemoveTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for range 5 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("slot: remove %s: %w", dir, err)
			}
			return nil
		}
		for _, p := range mps {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
	return fmt.Errorf("slot: remove %s: mounts are left under it", dir)
}

// mountsUnder returns the mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	out, err := hostdirs.MountsBelow(dir)
	if err != nil {
		return nil, fmt.Errorf("slot: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}
