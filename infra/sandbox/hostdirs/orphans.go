package hostdirs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Orphans returns the names of container folders and disk images (made or
// half made) that no
// container of known claims and that nothing changed within olderThan:
// left by a container deleted while a request prepared its folders again,
// or by a removal that failed half way. The caller removes them (Remove
// takes a name as an id: names map to themselves).
func (l *Layout) Orphans(ctx context.Context, known []string, olderThan time.Duration) ([]string, error) {
	keep := make(map[string]bool, len(known))
	for _, id := range known {
		keep[SafeID(id)] = true
	}
	newest := map[string]time.Time{}
	for _, dir := range []string{l.containers, l.disks} {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hostdirs: orphans: %w", err)
		}
		for _, e := range ents {
			name := e.Name()
			if dir == l.disks {
				// An image, or one being made (.ext4.tmp) that a
				// server killed while it made it left behind.
				var ok bool
				if name, ok = strings.CutSuffix(strings.TrimSuffix(name, ".tmp"), ".ext4"); !ok {
					continue
				}
			}
			if keep[name] || SafeID(name) != name {
				continue
			}
			fi, err := os.Lstat(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			if t := fi.ModTime(); t.After(newest[name]) {
				newest[name] = t
			}
		}
	}
	var out []string
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, t := range newest {
		if u, ok := l.used[name]; ok && u.at.After(t) {
			t = u.at // prepared since it last changed
		}
		if time.Since(t) >= olderThan {
			out = append(out, name)
		}
	}
	return out, ctx.Err()
}
