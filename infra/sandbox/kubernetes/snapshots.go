package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"
	"threadbox/domain/snapshot"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sparse"
)

// Snapshots takes and restores the files snapshots of time travel for
// containers whose files live on the cluster's claims (storage-class
// mode). Snapshots are kept on threadbox's disk as for every other
// backend, by a hostdirs.Layout of their own whose container folders are
// the mirrors of the claims, apart from the folders any sandbox mounts.
// Before a
// snapshot is taken the claim's regular files are copied into the mirror
// — only those whose size or modification time changed since the last
// copy — and what the claim no longer holds is removed from it; after a
// snapshot is put back, the mirror's files that differ from the claim's
// are written to it and the claim's files the snapshot does not hold are
// removed. Symbolic links and empty folders of a claim are not kept.
type Snapshots struct {
	*hostdirs.Layout
	files *Files
	locks sandbox.Locks // orders the copies between a claim and its mirror
}

// NewSnapshots returns the time-travel snapshots of files' containers,
// kept by layout, whose container folders serve as the claims' mirrors.
func NewSnapshots(layout *hostdirs.Layout, files *Files) *Snapshots {
	return &Snapshots{Layout: layout, files: files}
}

// TakeSnapshot copies the claim's workspace, uploads and outputs into the
// mirror, then snapshots the mirror.
func (s *Snapshots) TakeSnapshot(ctx context.Context, threadID, snapshotID, prevID, containerID string) (snapshot.Stats, error) {
	defer s.locks.Lock(containerID)()
	if err := s.pull(ctx, containerID); err != nil {
		return snapshot.Stats{}, err
	}
	return s.Layout.TakeSnapshot(ctx, threadID, snapshotID, prevID, containerID)
}

// RestoreSnapshot makes the claim's folders hold exactly the snapshot's
// files.
func (s *Snapshots) RestoreSnapshot(ctx context.Context, threadID, snapshotID, containerID string) error {
	defer s.locks.Lock(containerID)()
	// The mirror first matches the claim, so that only what the snapshot
	// changes is written back.
	if err := s.pull(ctx, containerID); err != nil {
		return err
	}
	if err := s.Layout.RestoreSnapshot(ctx, threadID, snapshotID, containerID); err != nil {
		return err
	}
	return s.push(ctx, containerID, nil)
}

// ContainerFiles returns the claim's files at paths as they are now.
func (s *Snapshots) ContainerFiles(ctx context.Context, containerID string, paths []string) (map[string]snapshot.File, error) {
	defer s.locks.Lock(containerID)()
	if err := s.pull(ctx, containerID); err != nil {
		return nil, err
	}
	return s.Layout.ContainerFiles(ctx, containerID, paths)
}

// RestoreGrowth returns how many more bytes the claim's files store once
// paths (nil: its folders whole) are what the snapshot holds, measured
// on the mirror once it matches the claim.
func (s *Snapshots) RestoreGrowth(ctx context.Context, threadID, snapshotID, containerID string, paths []string) (int64, error) {
	defer s.locks.Lock(containerID)()
	if err := s.pull(ctx, containerID); err != nil {
		return 0, err
	}
	return s.Layout.RestoreGrowth(ctx, threadID, snapshotID, containerID, paths)
}

// RestorePaths makes each of the claim's paths what the snapshot holds
// there, removing those it does not hold.
func (s *Snapshots) RestorePaths(ctx context.Context, threadID, snapshotID, containerID string, paths []string) error {
	defer s.locks.Lock(containerID)()
	if err := s.pull(ctx, containerID); err != nil {
		return err
	}
	if err := s.Layout.RestorePaths(ctx, threadID, snapshotID, containerID, paths); err != nil {
		return err
	}
	return s.push(ctx, containerID, paths)
}

// DropSnapshots removes every snapshot of a thread and the mirror of its
// container's claim (a thread's container has the thread's id).
func (s *Snapshots) DropSnapshots(ctx context.Context, threadID string) error {
	defer s.locks.Lock(threadID)()
	if err := s.Layout.DropSnapshots(ctx, threadID); err != nil {
		return err
	}
	return s.Layout.Remove(ctx, threadID)
}

// folder is one snapshotted folder: its mirror on the host and its path in
// the sandbox.
type folder struct {
	name, host, sandbox string
}

func (s *Snapshots) folders(containerID string) []folder {
	root := s.Layout.Dirs(containerID).Root
	var out []folder
	for _, mp := range file.DefaultTable() {
		if slices.Contains(snapshot.Folders, string(mp.Mount)) {
			out = append(out, folder{string(mp.Mount), filepath.Join(root, string(mp.Mount)), mp.Path})
		}
	}
	return out
}

// mirrored is a regular file of the mirror: its size and modification
// time, which are the claim's when it was copied.
type mirrored struct {
	size  int64
	mtime time.Time
}

// mirrorFiles lists the regular files under dir by their slash-separated
// path within it; a missing dir holds none.
func mirrorFiles(dir string) (map[string]mirrored, error) {
	out := map[string]mirrored{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return fs.SkipAll
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = mirrored{info.Size(), info.ModTime()}
		return nil
	})
	return out, err
}

// same tells whether the mirror's copy is the claim's file.
func (m mirrored) same(info file.Info) bool {
	return m.size == info.Size && m.mtime.Equal(info.Modified)
}

// pull makes the mirror hold the claim's regular files.
func (s *Snapshots) pull(ctx context.Context, containerID string) error {
	for _, fo := range s.folders(containerID) {
		infos, err := s.files.Walk(ctx, containerID, fo.sandbox)
		if err != nil && !errors.Is(err, file.ErrNotFound) {
			return fmt.Errorf("kubernetes: snapshot files of %s: %w", containerID, err)
		}
		if err := os.MkdirAll(fo.host, 0o755); err != nil {
			return fmt.Errorf("kubernetes: snapshot mirror of %s: %w", containerID, err)
		}
		if err := syncMirror(containerID, fo.host, infos, func(info file.Info) error { return s.fetch(ctx, containerID, fo, info) }); err != nil {
			return err
		}
	}
	return nil
}

// syncMirror makes the mirror folder host of container containerID hold
// the claim's regular files infos: what the claim no longer holds goes first, with the folders it
// leaves empty, then fetch copies each file the mirror lacks or holds
// another version of. Removing first lets a path change its kind: a file
// that became a folder (a → a/b), or a folder that became a file, would
// otherwise stand in the way of its new copy on every pull.
func syncMirror(containerID, host string, infos []file.Info, fetch func(file.Info) error) error {
	have, err := mirrorFiles(host)
	if err != nil {
		return fmt.Errorf("kubernetes: snapshot mirror of %s: %w", containerID, err)
	}
	walked := make(map[string]bool, len(infos))
	for _, info := range infos {
		if !info.Dir {
			walked[info.Rel] = true
		}
	}
	for rel := range have {
		if walked[rel] {
			continue
		}
		if err := os.Remove(filepath.Join(host, filepath.FromSlash(rel))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("kubernetes: snapshot mirror of %s: %w", containerID, err)
		}
	}
	if err := pruneEmpty(host); err != nil {
		return fmt.Errorf("kubernetes: snapshot mirror of %s: %w", containerID, err)
	}
	for _, info := range infos {
		if info.Dir {
			continue
		}
		if m, ok := have[info.Rel]; ok && m.same(info) {
			continue
		}
		if err := fetch(info); err != nil {
			return err
		}
	}
	return nil
}

// fetch copies one of the claim's files into the mirror, stamped with the
// claim's modification time.
func (s *Snapshots) fetch(ctx context.Context, containerID string, fo folder, info file.Info) error {
	rc, got, err := s.files.Open(ctx, containerID, path.Join(fo.sandbox, info.Rel))
	if errors.Is(err, file.ErrNotFound) {
		return nil // removed since the walk: the next snapshot sees it gone
	}
	if err != nil {
		return fmt.Errorf("kubernetes: snapshot files of %s: %w", containerID, err)
	}
	defer rc.Close()
	dst := filepath.Join(fo.host, filepath.FromSlash(info.Rel))
	if err := writeMirror(dst, rc); err != nil {
		return fmt.Errorf("kubernetes: snapshot mirror of %s: %w", containerID, err)
	}
	if err := os.Chtimes(dst, got.Modified, got.Modified); err != nil {
		return fmt.Errorf("kubernetes: snapshot mirror of %s: %w", containerID, err)
	}
	return nil
}

// push writes the mirror's files that differ from the claim's to it and
// removes the claim's files the mirror does not hold; with only, just
// those snapshot paths ("workspace/a.txt").
func (s *Snapshots) push(ctx context.Context, containerID string, only []string) error {
	for _, fo := range s.folders(containerID) {
		infos, err := s.files.Walk(ctx, containerID, fo.sandbox)
		if err != nil && !errors.Is(err, file.ErrNotFound) {
			return fmt.Errorf("kubernetes: restore files of %s: %w", containerID, err)
		}
		have, err := mirrorFiles(fo.host)
		if err != nil {
			return fmt.Errorf("kubernetes: restore mirror of %s: %w", containerID, err)
		}
		wanted := func(rel string) bool {
			return only == nil || slices.Contains(only, fo.name+"/"+rel)
		}
		claim := map[string]file.Info{}
		for _, info := range infos {
			if !info.Dir {
				claim[info.Rel] = info
			}
		}
		for rel := range claim {
			if _, ok := have[rel]; !ok && wanted(rel) {
				if err := s.files.Remove(ctx, containerID, path.Join(fo.sandbox, rel)); err != nil && !errors.Is(err, file.ErrNotFound) {
					return fmt.Errorf("kubernetes: restore files of %s: %w", containerID, err)
				}
			}
		}
		for rel, m := range have {
			if info, ok := claim[rel]; (ok && m.same(info)) || !wanted(rel) {
				continue
			}
			if err := s.send(ctx, containerID, fo, rel); err != nil {
				return err
			}
		}
	}
	return nil
}

// send writes one of the mirror's files to the claim and stamps the
// mirror's copy with the claim's modification time, so that the next pull
// leaves it.
func (s *Snapshots) send(ctx context.Context, containerID string, fo folder, rel string) error {
	src := filepath.Join(fo.host, filepath.FromSlash(rel))
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("kubernetes: restore mirror of %s: %w", containerID, err)
	}
	defer f.Close()
	info, err := s.files.Write(ctx, containerID, path.Join(fo.sandbox, rel), f, -1)
	if err != nil {
		return fmt.Errorf("kubernetes: restore files of %s: %w", containerID, err)
	}
	if err := os.Chtimes(src, info.Modified, info.Modified); err != nil {
		return fmt.Errorf("kubernetes: restore mirror of %s: %w", containerID, err)
	}
	return nil
}

// pruneEmpty removes the empty folders below dir, deepest first.
func pruneEmpty(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return fs.SkipAll
		}
		if err == nil && d.IsDir() && p != dir {
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	slices.SortFunc(dirs, func(a, b string) int {
		return strings.Count(b, string(os.PathSeparator)) - strings.Count(a, string(os.PathSeparator))
	})
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeMirror replaces the mirror's file dst with r's bytes, making its
// parents. From a file (Files.Open's spool of a large one) only the data
// extents are copied, so the holes of a sparse file stay holes.
func writeMirror(dst string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".mirror-*")
	if err != nil {
		return err
	}
	if f, ok := r.(*os.File); ok {
		err = sparse.Copy(tmp, f)
	} else {
		_, err = io.Copy(tmp, r)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
