package fileop

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"threadbox/domain/file"
)

// installSkills makes dir (the skills folder) hold exactly the tree of the
// tar stream r, at most limit bytes of files (negative: no limit): the tree
// is unpacked into a fresh folder inside dir, then each top-level entry
// replaces the one of its name and the entries it does not have are
// removed. Only folders and regular files are taken, by clean relative
// names; the code's container mounts dir read-only, so nothing but this
// writes there.
func installSkills(ctx context.Context, dir string, r io.Reader, limit int64) error {
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	incoming := ".incoming-" + hex.EncodeToString(suffix[:])
	if err := os.Mkdir(filepath.Join(dir, incoming), 0o755); err != nil {
		return fmt.Errorf("fileop: skills: %w", err)
	}
	defer os.RemoveAll(filepath.Join(dir, incoming))
	root, err := os.OpenRoot(filepath.Join(dir, incoming))
	if err != nil {
		return fmt.Errorf("fileop: skills: %w", err)
	}
	defer root.Close()
	tops := map[string]bool{}
	var total int64
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("fileop: skills: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == "." || strings.HasPrefix(name, "../") || name == ".." || strings.HasPrefix(name, ".incoming-") {
			return fmt.Errorf("fileop: skills: entry name %q", h.Name)
		}
		tops[strings.SplitN(name, "/", 2)[0]] = true
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("fileop: skills: %w", err)
			}
		case tar.TypeReg:
			total += h.Size
			if limit >= 0 && total > limit {
				return fmt.Errorf("fileop: skills: %d bytes: %w", total, file.ErrTooLarge)
			}
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("fileop: skills: %w", err)
				}
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return fmt.Errorf("fileop: skills: %w", err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("fileop: skills: %w", err)
			}
		default:
			return fmt.Errorf("fileop: skills: entry %q is neither a folder nor a regular file", h.Name)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("fileop: skills: %w", err)
	}
	for _, e := range entries {
		if e.Name() == incoming {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("fileop: skills: %w", err)
		}
	}
	for name := range tops {
		if err := os.Rename(filepath.Join(dir, incoming, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("fileop: skills: install %s: %w", name, err)
		}
	}
	return nil
}
