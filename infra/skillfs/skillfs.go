// Package skillfs keeps the files of uploaded skills on disk, one folder per
// version (root/<org>/<name>/<version>/), and copies the versions a request
// uses into a container's skills folder, which sandboxes mount read-only at
// /mnt/skills.
package skillfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"threadbox/domain/skill"
)

// Store is the on-disk skill store.
type Store struct {
	root            string
	containerSkills func(containerID string) string
}

// New returns the store under root; containerSkills names the host folder
// a container's sandbox sees at /mnt/skills.
func New(root string, containerSkills func(containerID string) string) *Store {
	return &Store{root: root, containerSkills: containerSkills}
}

func (s *Store) dir(orgID, name string, version int) (string, error) {
	if err := skill.ValidateName(name); err != nil {
		return "", err
	}
	if orgID == "" || strings.ContainsAny(orgID, `/\`) || strings.HasPrefix(orgID, ".") {
		return "", fmt.Errorf("skillfs: bad org id %q", orgID)
	}
	return filepath.Join(s.root, orgID, name, strconv.Itoa(version)), nil
}

// Save writes the files of one skill version. They are written into a
// temporary folder that is renamed into place, so a version is either
// absent or whole. A folder already at the version is replaced: the
// skills service saves a version no record names yet (under its lock), so
// such a folder is what an upload left whose record was never written (the
// database refused it, or the server stopped in between), and keeping it
// would refuse every later upload of that version.
func (s *Store) Save(ctx context.Context, orgID, name string, version int, files []skill.File) error {
	dst, err := s.dir(orgID, name, version)
	if err != nil {
		return err
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".incoming-")
	if err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	if err := writeTree(ctx, tmp, files); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("skillfs: store: %w", err)
		}
		if err := replaceDir(parent, tmp, dst); err != nil {
			return fmt.Errorf("skillfs: store: %w", err)
		}
	}
	return nil
}

// replaceDir puts the folder src in the place of the folder dst, both in
// parent: dst is moved aside first (a folder is never renamed over one
// that holds files), then removed.
func replaceDir(parent, src, dst string) error {
	stale, err := os.MkdirTemp(parent, ".stale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stale)
	if err := os.Rename(dst, filepath.Join(stale, "old")); err != nil {
		return err
	}
	return os.Rename(src, dst)
}

// writeTree writes files below root; their paths are clean and relative
// (skill.CleanEntry), and root is new, so nothing in it is a link.
func writeTree(ctx context.Context, root string, files []skill.File) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	defer r.Close()
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if dir := filepath.Dir(filepath.FromSlash(f.Path)); dir != "." {
			if err := r.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("skillfs: %w", err)
			}
		}
		if err := r.WriteFile(filepath.FromSlash(f.Path), f.Data, 0o644); err != nil {
			return fmt.Errorf("skillfs: write %s: %w", f.Path, err)
		}
	}
	return nil
}

// Delete removes every stored version of a skill.
func (s *Store) Delete(_ context.Context, orgID, name string) error {
	d, err := s.dir(orgID, name, 0)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Dir(d)); err != nil {
		return fmt.Errorf("skillfs: delete: %w", err)
	}
	return nil
}

// Load is one skill version a request uses.
type Load struct {
	OrgID   string
	Name    string
	Version int
}

// Sync makes the container's skills folder hold exactly the given skill
// versions, each at <name>/: other skill folders are removed.
func (s *Store) Sync(ctx context.Context, containerID string, loads []Load) error {
	target := s.containerSkills(containerID)
	if len(loads) == 0 {
		// The common case of a request without skills: the folder is
		// empty or missing unless an earlier request loaded some. It holds
		// only folders (skills, and .incoming- ones), so a link count of 2
		// (itself and its ".") says it is empty in one stat; a file system
		// that does not count links (1) is read.
		fi, err := os.Stat(target)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if st, ok := statOf(fi); ok && err == nil && st.Nlink == 2 {
			return nil
		}
		entries, err := os.ReadDir(target)
		if errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0 {
			return nil
		}
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	want := map[string]bool{}
	for _, l := range loads {
		if err := ctx.Err(); err != nil {
			return err
		}
		src, err := s.dir(l.OrgID, l.Name, l.Version)
		if err != nil {
			return err
		}
		tmp, err := os.MkdirTemp(target, ".incoming-")
		if err != nil {
			return fmt.Errorf("skillfs: %w", err)
		}
		if err := copyTree(ctx, src, tmp); err != nil {
			os.RemoveAll(tmp)
			return err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("skillfs: %w", err)
		}
		dst := filepath.Join(target, l.Name)
		if err := os.RemoveAll(dst); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("skillfs: %w", err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("skillfs: install %s: %w", l.Name, err)
		}
		want[l.Name] = true
	}
	entries, err := os.ReadDir(target)
	if err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			if err := os.RemoveAll(filepath.Join(target, e.Name())); err != nil {
				return fmt.Errorf("skillfs: %w", err)
			}
		}
	}
	return nil
}

// copyTree copies the regular files and folders of src (written by Save,
// so holding no links) into dst.
func copyTree(ctx context.Context, src, dst string) error {
	from, err := os.OpenRoot(src)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("skillfs: skill files missing: %w", err)
	}
	if err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	defer from.Close()
	to, err := os.OpenRoot(dst)
	if err != nil {
		return fmt.Errorf("skillfs: %w", err)
	}
	defer to.Close()
	return fs.WalkDir(from.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case p == ".":
			return nil
		case d.IsDir():
			return to.Mkdir(p, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := from.ReadFile(p)
		if err != nil {
			return fmt.Errorf("skillfs: read %s: %w", p, err)
		}
		return to.WriteFile(p, data, 0o644)
	})
}

// Has reports whether the files of one skill version are stored here.
func (s *Store) Has(_ context.Context, orgID, name string, version int) (bool, error) {
	dst, err := s.dir(orgID, name, version)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(dst)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("skillfs: %w", err)
	}
	return true, nil
}

func statOf(fi os.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}
