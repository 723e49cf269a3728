package hostdirs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Usage returns the bytes a container's files use: the sizes of the regular
// files in its workspace, uploads and outputs folders (its skills folder
// holds copies of the org's skills and is not counted). Links are not
// followed. With loop quotas a container whose disk is not mounted (no
// Prepare since the server started) is measured by its image's allocated
// blocks instead, which also counts the file system's own few megabytes. A
// container without folders uses nothing.
func (l *Layout) Usage(ctx context.Context, id string) (int64, error) {
	d := l.Dirs(id)
	if l.opts.Quota == QuotaLoop {
		mounted, err := isMountPoint(d.Root)
		if err != nil {
			return 0, err
		}
		if !mounted {
			fi, err := os.Stat(l.DiskImage(id))
			switch {
			case err == nil:
				return allocated(fi), nil
			case !errors.Is(err, fs.ErrNotExist):
				return 0, fmt.Errorf("hostdirs: usage: %w", err)
			}
		}
	}
	var total int64
	for _, dir := range []string{d.Workspace, d.Uploads, d.Outputs} {
		err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // gone meanwhile
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !e.Type().IsRegular() {
				return nil
			}
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			total += fi.Size()
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("hostdirs: usage: %w", err)
		}
	}
	return total, nil
}
