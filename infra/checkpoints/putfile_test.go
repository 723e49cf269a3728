package checkpoints

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"threadbox/infra/dirwalk/dirwalktest"
)

// memBlobs keeps what is put, by a name of its own.
type memBlobs struct{ put map[string][]byte }

func (m *memBlobs) Put(_ context.Context, r io.Reader) (string, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	sum := "blob" + string(rune('a'+len(m.put)))
	m.put[sum] = b
	return sum, int64(len(b)), nil
}

func (m *memBlobs) Open(_ context.Context, sum string) (io.ReadSeekCloser, error) {
	b, ok := m.put[sum]
	if !ok {
		return nil, os.ErrNotExist
	}
	return nopCloser{bytes.NewReader(b)}, nil
}

func (m *memBlobs) Remove(context.Context, string, time.Time) (bool, error) { return false, nil }
func (m *memBlobs) Walk(context.Context, func(string, time.Time) error) error {
	return nil
}

// nopCloser is an io.ReadSeeker that closes as nothing.
type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// TestPutFileNeverFollowsALink: a file the walk found regular that code
// swapped for a symbolic link, a folder above it swapped for a link, or a
// FIFO in its place, is not sent: no file outside the container's folders
// reaches the store, and a FIFO does not hold the mirror up.
func TestPutFileNeverFollowsALink(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("the server's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "workspace", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The last component is a link.
	if err := os.Symlink(secret, filepath.Join(root, "workspace", "a")); err != nil {
		t.Fatal(err)
	}
	// A folder above is a link.
	if err := os.Symlink(outside, filepath.Join(root, "workspace", "up")); err != nil {
		t.Fatal(err)
	}
	// A FIFO, which an open without O_NONBLOCK waits on for a writer.
	if err := syscall.Mkfifo(filepath.Join(root, "workspace", "dir", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "workspace", "dir", "plain"), []byte("plain"), 0o644); err != nil {
		t.Fatal(err)
	}
	blobs := &memBlobs{put: map[string][]byte{}}
	if sum, sparse, err := putFile(context.Background(), blobs, root, "workspace/dir/plain", 5); err != nil || sparse || string(blobs.put[sum]) != "plain" {
		t.Fatalf("a regular file: %q, %v, %v", blobs.put[sum], sparse, err)
	}
	for _, rel := range []string{"workspace/a", "workspace/up/secret", "workspace/dir/fifo"} {
		blobs := &memBlobs{put: map[string][]byte{}}
		done := make(chan error, 1)
		go func() {
			_, _, err := putFile(context.Background(), blobs, root, rel, 19)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, errNotFile) {
				t.Errorf("%s: %v, want errNotFile", rel, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the send still waits after 5s", rel)
		}
		for _, b := range blobs.put {
			if bytes.Contains(b, []byte("secret")) {
				t.Errorf("%s: the store got %q, a file outside the container's folders", rel, b)
			}
		}
	}
}

// TestReadLinkNeverFollowsALink: the target of a link the walk found is
// read relative to its folder: a folder above it that code swapped for a
// link to a host folder gives errNotFile, never the target of a link of
// the host, and so does a link swapped for a file.
func TestReadLinkNeverFollowsALink(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink("/the/host's/target", filepath.Join(outside, "hostlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "workspace", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../own/target", filepath.Join(root, "workspace", "dir", "own")); err != nil {
		t.Fatal(err)
	}
	// A folder above is a link to the host's folder.
	if err := os.Symlink(outside, filepath.Join(root, "workspace", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "workspace", "dir", "plain"), []byte("plain"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readLink(root, "workspace/dir/own"); err != nil || got != "../own/target" {
		t.Fatalf("the container's link: %q, %v", got, err)
	}
	for _, rel := range []string{"workspace/up/hostlink", "workspace/dir/plain"} {
		if got, err := readLink(root, rel); !errors.Is(err, errNotFile) {
			t.Errorf("%s: %q, %v, want errNotFile", rel, got, err)
		}
	}
}

// oneRoot is the Roots of a single container's folder.
type oneRoot string

func (r oneRoot) FilesRoot(context.Context, string) (string, error) { return string(r), nil }

// TestMirrorNeverWalksThroughALink: a folder the mirror's walk found,
// which code swaps for a symbolic link to a host folder before the walk
// descends into it, is left out: no entry of the host folder (its names,
// modes and owners) is in the manifest, nor any of its content in the
// store. The container's other files are mirrored.
func TestMirrorNeverWalksThroughALink(t *testing.T) {
	root, outside, dir := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "host-folder"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "host-file"), []byte("the server's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"workspace/dir/sub", "workspace/keep"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "workspace", "keep", "notes"), []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := dirwalktest.SwapAt(t, &walker, "workspace/dir", filepath.Join(root, "workspace", "dir"), outside)
	blobs := &memBlobs{put: map[string][]byte{}}
	files := NewFiles(oneRoot(root), func(string, string) (FileBlobs, error) { return blobs, nil })
	if _, err := files.Mirror(context.Background(), "org", "ctr", dir); err != nil {
		t.Fatal(err)
	}
	if !swapped() {
		t.Fatal("the walk never reached the folder")
	}
	m, err := readManifest(filepath.Join(dir, manifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range m.Entries {
		paths = append(paths, e.Path)
		if strings.HasPrefix(e.Path, "workspace/dir/") {
			t.Errorf("the manifest holds %q, an entry of a host folder (%v)", e.Path, e.Mode)
		}
	}
	if !slices.Contains(paths, "workspace/keep/notes") {
		t.Errorf("the container's file is not mirrored: %q", paths)
	}
	for _, b := range blobs.put {
		if bytes.Contains(b, []byte("secret")) {
			t.Errorf("the store got %q, a file outside the container's folders", b)
		}
	}
}

// TestApplyNeverRemovesThroughALink: a folder the clean-up walk of Apply
// found, which code swaps for a symbolic link to a host folder before the
// walk descends into it, is left out: the host folder's file, which the
// mirror does not hold, is not removed through the link. What the mirror
// does not hold in the container's folders is removed.
func TestApplyNeverRemovesThroughALink(t *testing.T) {
	root, outside, dir := t.TempDir(), t.TempDir(), t.TempDir()
	hostFile := filepath.Join(outside, "x")
	if err := os.WriteFile(hostFile, []byte("the host's own"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "workspace", "dir")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(root, "workspace", "extra")
	if err := os.WriteFile(extra, []byte("not in the mirror"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := Manifest{Entries: []Entry{{Path: "workspace", Mode: fs.ModeDir | 0o755}, {Path: "workspace/dir", Mode: fs.ModeDir | 0o755}}}
	if err := writeManifest(filepath.Join(dir, manifestFile), m); err != nil {
		t.Fatal(err)
	}
	swapped := dirwalktest.SwapAt(t, &walker, "workspace/dir", sub, outside)
	files := NewFiles(oneRoot(root), func(string, string) (FileBlobs, error) { return &memBlobs{put: map[string][]byte{}}, nil })
	if _, err := files.Apply(context.Background(), "org", "ctr", dir); err != nil {
		t.Fatal(err)
	}
	if !swapped() {
		t.Fatal("the walk never reached the folder")
	}
	if _, err := os.Stat(hostFile); err != nil {
		t.Errorf("the host folder's file is gone: %v", err)
	}
	if _, err := os.Lstat(extra); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file the mirror does not hold is left: %v", err)
	}
}

// TestApplyNeverWritesBeyondASwappedFolder: a folder above an entry that
// code swaps for a symbolic link to a host folder after Apply reached the
// entry, just before it writes it, never makes Apply write into the host
// folder: a file, a folder and a link each land in the folder Apply
// opened, which the swap moved aside, and the host folder stays empty.
func TestApplyNeverWritesBeyondASwappedFolder(t *testing.T) {
	ctx := context.Background()
	const content = "from the mirror"
	blobs := &memBlobs{put: map[string][]byte{}}
	sum, n, err := blobs.Put(ctx, strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []Entry{
		{Path: "workspace/sub/f", Mode: 0o644, Size: n, MTime: time.Now().UnixNano(), SHA256: sum},
		{Path: "workspace/sub/d", Mode: fs.ModeDir | 0o755},
		{Path: "workspace/sub/l", Mode: fs.ModeSymlink | 0o777, Link: "f"},
	} {
		t.Run(path.Base(e.Path), func(t *testing.T) {
			root, outside, dir := t.TempDir(), t.TempDir(), t.TempDir()
			sub, aside := filepath.Join(root, "workspace", "sub"), filepath.Join(root, "aside")
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			m := Manifest{Entries: []Entry{
				{Path: "workspace", Mode: fs.ModeDir | 0o755},
				{Path: "workspace/sub", Mode: fs.ModeDir | 0o755},
				e,
			}}
			if err := writeManifest(filepath.Join(dir, manifestFile), m); err != nil {
				t.Fatal(err)
			}
			swapped := false
			beforeWrite = func(rel string) {
				if rel != e.Path {
					return
				}
				// Aside, out of the mirrored folders, so that Apply's
				// clean-up leaves it to be looked at.
				if err := os.Rename(sub, aside); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(outside, sub); err != nil {
					t.Error(err)
				}
				swapped = true
			}
			t.Cleanup(func() { beforeWrite = nil })
			files := NewFiles(oneRoot(root), func(string, string) (FileBlobs, error) { return blobs, nil })
			_, err := files.Apply(ctx, "org", "ctr", dir)
			if !swapped {
				t.Fatal("Apply never reached the entry")
			}
			if left, rerr := os.ReadDir(outside); rerr != nil || len(left) != 0 {
				t.Fatalf("Apply (error %v) wrote into the host folder through the link: %v %v", err, left, rerr)
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(filepath.Join(aside, path.Base(e.Path)))
			if err != nil || fi.Mode().Type() != e.Mode.Type() {
				t.Fatalf("the entry is not in the folder Apply opened: %v %v", fi, err)
			}
		})
	}
}
