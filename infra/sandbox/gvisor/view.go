package gvisor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/slot"
)

// A sandbox's folders reach it through a view: a host folder of its own
// (a shared mount, read-only) holding copies of the image's /home/agent
// and /mnt, bound at those two places, with the container's folders bound
// under it on the host. gVisor's file server sees a mount made under a
// folder it serves after the sandbox started, never one made on that
// folder itself; so a warm sandbox boots over an empty view and a claim
// binds the container's folders into it (boxes.Pool with viewLayout).
// Cold boots, warm sandboxes and restores use the same layout, so a
// checkpoint of any restores as any other.

// viewParents are the sandbox folders bound from a view, by the name of
// their copy in it.
var viewParents = []struct{ target, name string }{
	{"/home/agent", "home"},
	{"/mnt", "mnt"},
}

// viewTargets names the view's places in the runtime of a checkpoint: one
// taken before views restores into other mounts.
const viewTargets = "binds=/home/agent,/mnt"

// place returns the folder of view dir where the sandbox folder target is
// bound, or "" for a target outside the view's parents (bound directly).
func place(dir, target string) string {
	for _, p := range viewParents {
		if rel, ok := strings.CutPrefix(filepath.Clean(target), p.target+"/"); ok {
			return filepath.Join(dir, p.name, filepath.Clean("/"+rel))
		}
	}
	return ""
}

// viewLayout shapes the warm pool's slots as views of the root filesystem.
type viewLayout struct{ rootfs string }

// Make creates the view dir for a sandbox of mounts.
func (l viewLayout) Make(dir string, mounts []sandbox.Mount) error {
	return makeView(dir, l.rootfs, mounts)
}

// Place returns where mount m is bound in view dir.
func (viewLayout) Place(dir string, _ int, m sandbox.Mount) string { return place(dir, m.Target) }

// Remove unmounts and deletes view dir.
func (viewLayout) Remove(dir string) error { return slot.RemoveTree(dir) }

// makeView creates view dir: a shared mount holding copies of rootfs's
// view parents and a folder for every mount to bind there, read-only.
func makeView(dir, rootfs string, mounts []sandbox.Mount) error {
	if err := slot.MakeShared(dir); err != nil {
		return err
	}
	err := func() error {
		for _, p := range viewParents {
			if err := copyTree(filepath.Join(rootfs, p.target), filepath.Join(dir, p.name)); err != nil {
				return fmt.Errorf("view: %w", err)
			}
		}
		for _, m := range mounts {
			if pl := place(dir, m.Target); pl != "" {
				if err := os.MkdirAll(pl, 0o755); err != nil {
					return fmt.Errorf("view: %w", err)
				}
			}
		}
		return slot.ReadOnly(dir)
	}()
	if err != nil {
		_ = slot.RemoveTree(dir)
		return err
	}
	return nil
}

// bindView binds the sources of mounts at their places in view dir,
// except those already there (a warm sandbox's empty places).
func bindView(dir string, mounts []sandbox.Mount) error {
	for _, m := range mounts {
		if pl := place(dir, m.Target); pl != "" && m.Source != pl {
			if err := slot.BindAt(pl, m.Source, m.ReadOnly); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyTree copies the folder src to dst (which must not exist): folders,
// regular files and symbolic links, with their modes and owners.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, fi.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if err := os.Chmod(to, fi.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, to); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, to, fi.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return os.Lchown(to, int(st.Uid), int(st.Gid))
		}
		return nil
	})
}

// copyFile copies the regular file src to dst with mode. No process is
// forked while dst is open: a child forked meanwhile would hold it open
// for writing until it execs, and the view could not be made read-only
// (busy) until then.
func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
