package hostdirs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MountsBelow lists the mount points at or below dir (symbolic links of
// dir resolved), in the order of /proc/self/mountinfo: a mount before those
// stacked on it. The host's view, for cleaning up and for measuring leaks.
func MountsBelow(dir string) ([]string, error) {
	return mountPoints(dir, func(p, abs string) bool { return p == abs || strings.HasPrefix(p, abs+"/") })
}

// mountPoints lists the mount points of /proc/self/mountinfo that keep
// holds, given with the absolute path of dir (symbolic links resolved).
func mountPoints(dir string, keep func(p, abs string) bool) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("hostdirs: %w", err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("hostdirs: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := unescapeMount(f[4]); keep(p, abs) {
			out = append(out, p)
		}
	}
	return out, nil
}

// LoopsBelow lists the loop devices whose backing file is (or was, before
// its deletion) below dir.
func LoopsBelow(dir string) []string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		back := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if strings.HasPrefix(back, dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}
