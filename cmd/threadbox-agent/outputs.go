package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// moveOutputs moves the top-level regular files of src into dst, replacing
// files of the same name, and returns their new paths. Folders, symlinks
// and special files stay behind (and are removed with src). It moves what
// it can and reports the files it could not move.
func moveOutputs(src, dst string) ([]string, error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, fmt.Errorf("outputs: read %s: %w", src, err)
	}
	var moved []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if len(moved) == 0 && len(errs) == 0 {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return nil, fmt.Errorf("outputs: %w", err)
			}
			if err := own(dst); err != nil {
				return nil, fmt.Errorf("outputs: %w", err)
			}
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if err := moveFile(from, to); err != nil {
			errs = append(errs, err)
			continue
		}
		moved = append(moved, to)
	}
	if err := errors.Join(errs...); err != nil {
		return moved, fmt.Errorf("outputs: %w", err)
	}
	return moved, nil
}

// moveFile renames from to to, copying when they are on different file
// systems (the outputs folder is usually a bind mount).
func moveFile(from, to string) error {
	err := os.Rename(from, to)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(to), ".tmp-"+filepath.Base(to)+"-")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	_ = tmp.Chmod(info.Mode().Perm())
	if commandUser != nil {
		_ = tmp.Chown(int(commandUser.Uid), int(commandUser.Gid))
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), to); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Remove(from)
}

// oomCount reads the memory cgroup's oom_kill counter (a cgroup v2
// memory.events file, or /proc/vmstat in a virtual machine), which every
// command reads as it starts and again when it is killed. The file is
// opened once and read from its start each time, which saves an open and a
// close per read; a file that cannot be opened at the first read counts as
// none from then on (a control group file is there from the sandbox's
// start or never).
type oomCount struct {
	path string

	mu     sync.Mutex
	opened bool
	f      *os.File
	buf    []byte
}

// kills returns the oom_kill counter, and false when it cannot be read.
func (o *oomCount) kills() (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.opened {
		o.opened = true
		o.f, _ = os.Open(o.path)
		o.buf = make([]byte, 4096)
	}
	if o.f == nil {
		return 0, false
	}
	n := 0
	for {
		m, err := o.f.ReadAt(o.buf[n:], int64(n))
		n += m
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, false
		}
		if n == len(o.buf) {
			o.buf = append(o.buf, make([]byte, len(o.buf))...)
		}
	}
	return parseOOMKills(o.buf[:n])
}

// parseOOMKills returns the oom_kill line's value of a memory.events or
// vmstat text, and false when it has none.
func parseOOMKills(b []byte) (int64, bool) {
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// outputsState is what the outputs folder's top-level regular files were
// (size and modification time) when a command started.
type outputsState map[string][2]int64

// snapshotOutputs reads the top-level regular files of dir (the first
// 1000 entries).
func snapshotOutputs(dir string) outputsState {
	st := outputsState{}
	f, err := os.Open(dir)
	if err != nil {
		return st
	}
	defer f.Close()
	entries, _ := f.ReadDir(1000)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			st[e.Name()] = [2]int64{info.Size(), info.ModTime().UnixNano()}
		}
	}
	return st
}

// writtenSince lists the top-level regular files of dir that are new or
// changed against before, except those in skip.
func writtenSince(dir string, before outputsState, skip []string) []string {
	var out []string
	for name, now := range snapshotOutputs(dir) {
		p := filepath.Join(dir, name)
		if was, ok := before[name]; (!ok || was != now) && !slices.Contains(skip, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
