package fsroot

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"threadbox/domain/file"
)

// fixture is one container's folders in a temp dir, plus a secret file
// outside them that no operation may ever read or change.
type fixture struct {
	dirs   Dirs
	secret string
	fs     *FS
}

const secretBytes = "TOP-SECRET-HOST-FILE"

func newFixture(t *testing.T, noOpenat2 bool) *fixture {
	t.Helper()
	base := t.TempDir()
	d := Dirs{
		Workspace: filepath.Join(base, "c", "workspace"),
		Uploads:   filepath.Join(base, "c", "uploads"),
		Outputs:   filepath.Join(base, "c", "outputs"),
		Skills:    filepath.Join(base, "c", "skills"),
	}
	for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(base, "secret.txt")
	if err := os.WriteFile(secret, []byte(secretBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fixture{dirs: d, secret: secret, fs: New(d, Options{noOpenat2: noOpenat2})}
}

// modes runs a test with openat2 and with the component walk.
func modes(t *testing.T, fn func(t *testing.T, fx *fixture)) {
	for _, mode := range []struct {
		name string
		walk bool
	}{{"openat2", false}, {"walk", true}} {
		t.Run(mode.name, func(t *testing.T) { fn(t, newFixture(t, mode.walk)) })
	}
}

func (fx *fixture) checkSecret(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(fx.secret)
	if err != nil || string(b) != secretBytes {
		t.Fatalf("secret file changed: %q, %v", b, err)
	}
}

func TestWriteOpenRoundTrip(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		before := time.Now().Add(-time.Second)
		info, err := fx.fs.Write(ctx, file.Uploads, "data/2026/q3.csv", strings.NewReader("a,b\n1,2\n"), 100)
		if err != nil {
			t.Fatal(err)
		}
		if info.Rel != "data/2026/q3.csv" || info.Size != 8 || info.Dir || info.Created.Before(before) || info.Inode == 0 {
			t.Fatalf("info = %+v", info)
		}
		got, err := os.ReadFile(filepath.Join(fx.dirs.Uploads, "data", "2026", "q3.csv"))
		if err != nil || string(got) != "a,b\n1,2\n" {
			t.Fatalf("on disk: %q, %v", got, err)
		}
		// Overwrite.
		if _, err := fx.fs.WriteFile(ctx, file.Uploads, "data/2026/q3.csv", []byte("new")); err != nil {
			t.Fatal(err)
		}
		fh, oinfo, err := fx.fs.Open(ctx, file.Uploads, "data/2026/q3.csv")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(fh)
		fh.Close()
		if string(b) != "new" || oinfo.Size != 3 {
			t.Fatalf("Open read %q size %d", b, oinfo.Size)
		}
		rb, err := fx.fs.ReadFile(ctx, file.Uploads, "data/2026/q3.csv", 3)
		if err != nil || string(rb) != "new" {
			t.Fatalf("ReadFile = %q, %v", rb, err)
		}
		if _, err := fx.fs.ReadFile(ctx, file.Uploads, "data/2026/q3.csv", 2); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ReadFile over cap = %v", err)
		}
		st, err := fx.fs.Stat(ctx, file.Uploads, "data/2026")
		if err != nil || !st.Dir {
			t.Fatalf("Stat folder = %+v, %v", st, err)
		}
		entries, _ := os.ReadDir(filepath.Join(fx.dirs.Uploads, "data", "2026"))
		if len(entries) != 1 {
			t.Fatalf("temp files left behind: %v", entries)
		}
	})
}

func TestWriteLimit(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		if _, err := fx.fs.WriteFile(ctx, file.Outputs, "r.txt", []byte("keep")); err != nil {
			t.Fatal(err)
		}
		_, err := fx.fs.Write(ctx, file.Outputs, "r.txt", bytes.NewReader(make([]byte, 11)), 10)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Write over limit = %v, want ErrTooLarge", err)
		}
		got, _ := os.ReadFile(filepath.Join(fx.dirs.Outputs, "r.txt"))
		if string(got) != "keep" {
			t.Fatalf("file changed to %q by a refused write", got)
		}
		entries, _ := os.ReadDir(fx.dirs.Outputs)
		if len(entries) != 1 {
			t.Fatalf("temp file left: %v", entries)
		}
		if _, err := fx.fs.Write(ctx, file.Outputs, "ten.txt", bytes.NewReader(make([]byte, 10)), 10); err != nil {
			t.Fatalf("Write at limit = %v", err)
		}
	})
}

func TestInvalidRel(t *testing.T) {
	fx := newFixture(t, false)
	ctx := context.Background()
	for _, rel := range []string{"../secret.txt", "/etc/passwd", "a//b", "a/./b", "a/../../x", "x\x00y"} {
		if _, err := fx.fs.Write(ctx, file.Workspace, rel, strings.NewReader("x"), -1); !errors.Is(err, ErrInvalidRel) {
			t.Errorf("Write(%q) = %v, want ErrInvalidRel", rel, err)
		}
		if _, _, err := fx.fs.Open(ctx, file.Workspace, rel); !errors.Is(err, ErrInvalidRel) {
			t.Errorf("Open(%q) = %v, want ErrInvalidRel", rel, err)
		}
	}
	fx.checkSecret(t)
}

func TestSymlinkLastComponentRefused(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		link := filepath.Join(fx.dirs.Outputs, "leak.txt")
		if err := os.Symlink(fx.secret, link); err != nil {
			t.Fatal(err)
		}
		// A link that stays inside the folder is refused too.
		if err := os.WriteFile(filepath.Join(fx.dirs.Outputs, "real.txt"), []byte("real"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("real.txt", filepath.Join(fx.dirs.Outputs, "inner.txt")); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"leak.txt", "inner.txt"} {
			if _, _, err := fx.fs.Open(ctx, file.Outputs, rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("Open(%s) = %v, want ErrSymlink", rel, err)
			}
			if _, err := fx.fs.ReadFile(ctx, file.Outputs, rel, 1<<20); !errors.Is(err, ErrSymlink) {
				t.Errorf("ReadFile(%s) = %v, want ErrSymlink", rel, err)
			}
			if _, err := fx.fs.Stat(ctx, file.Outputs, rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("Stat(%s) = %v, want ErrSymlink", rel, err)
			}
		}
		list, err := fx.fs.List(ctx, file.Outputs, ".")
		if err != nil || len(list) != 1 || list[0].Rel != "real.txt" {
			t.Errorf("List = %+v, %v; want only real.txt", list, err)
		}
		// Removing the link removes the link, not its target.
		if err := fx.fs.Remove(ctx, file.Outputs, "leak.txt"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(link); !os.IsNotExist(err) {
			t.Errorf("link still there: %v", err)
		}
		fx.checkSecret(t)
	})
}

func TestSymlinkedFolderRefused(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		outside := filepath.Dir(fx.secret)
		if err := os.Symlink(outside, filepath.Join(fx.dirs.Workspace, "escape")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(fx.dirs.Workspace, "real"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("real", filepath.Join(fx.dirs.Workspace, "alias")); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"escape/secret.txt", "alias/x.txt"} {
			if _, _, err := fx.fs.Open(ctx, file.Workspace, rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("Open(%s) = %v, want ErrSymlink", rel, err)
			}
			if _, err := fx.fs.Stat(ctx, file.Workspace, rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("Stat(%s) = %v, want ErrSymlink", rel, err)
			}
			if _, err := fx.fs.WriteFile(ctx, file.Workspace, rel, []byte("pwned")); !errors.Is(err, ErrSymlink) {
				t.Errorf("WriteFile(%s) = %v, want ErrSymlink", rel, err)
			}
			if err := fx.fs.Remove(ctx, file.Workspace, rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("Remove(%s) = %v, want ErrSymlink", rel, err)
			}
		}
		if _, err := fx.fs.WriteFile(ctx, file.Workspace, "escape/new/x.txt", []byte("pwned")); !errors.Is(err, ErrSymlink) {
			t.Errorf("WriteFile through link with new parents = %v, want ErrSymlink", err)
		}
		if _, err := fx.fs.List(ctx, file.Workspace, "escape"); !errors.Is(err, ErrSymlink) {
			t.Errorf("List(escape) = %v, want ErrSymlink", err)
		}
		if _, err := fx.fs.RemovePrefix(ctx, file.Workspace, "escape/"); !errors.Is(err, ErrSymlink) {
			t.Errorf("RemovePrefix(escape/) = %v, want ErrSymlink", err)
		}
		if _, err := os.Stat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
			t.Errorf("folder created outside: %v", err)
		}
		fx.checkSecret(t)
	})
}

func TestUploadOntoSymlinkReplacesTheLink(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		link := filepath.Join(fx.dirs.Uploads, "data.csv")
		if err := os.Symlink(fx.secret, link); err != nil {
			t.Fatal(err)
		}
		if _, err := fx.fs.WriteFile(ctx, file.Uploads, "data.csv", []byte("uploaded")); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(link)
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("data.csv is %v, %v; want a regular file", fi.Mode(), err)
		}
		got, _ := os.ReadFile(link)
		if string(got) != "uploaded" {
			t.Fatalf("data.csv = %q", got)
		}
		fx.checkSecret(t)
	})
}

func TestSpecialFilesRefusedPromptly(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		if err := syscall.Mkfifo(filepath.Join(fx.dirs.Outputs, "pipe"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(fx.dirs.Outputs, "folder"), 0o755); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := fx.fs.Open(ctx, file.Outputs, "pipe")
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Fatalf("Open(fifo) = %v, want ErrNotRegular", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Open(fifo) blocked")
		}
		if _, err := fx.fs.ReadFile(ctx, file.Outputs, "pipe", 10); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile(fifo) = %v", err)
		}
		if _, _, err := fx.fs.Open(ctx, file.Outputs, "folder"); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Open(folder) = %v", err)
		}
		if _, err := fx.fs.Stat(ctx, file.Outputs, "pipe"); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Stat(fifo) = %v", err)
		}
		if err := fx.fs.Remove(ctx, file.Outputs, "folder"); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Remove(folder) = %v", err)
		}
		if _, err := fx.fs.WriteFile(ctx, file.Outputs, "folder", []byte("x")); !errors.Is(err, ErrNotRegular) {
			t.Errorf("WriteFile onto folder = %v", err)
		}
		list, err := fx.fs.List(ctx, file.Outputs, ".")
		if err != nil || len(list) != 0 {
			t.Errorf("List = %+v, %v; want nothing", list, err)
		}
	})
}

func TestNotFound(t *testing.T) {
	fx := newFixture(t, false)
	ctx := context.Background()
	if _, _, err := fx.fs.Open(ctx, file.Uploads, "nope.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open = %v", err)
	}
	if _, err := fx.fs.Stat(ctx, file.Uploads, "a/b/c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat = %v", err)
	}
	// A name longer than any file system takes (a file id may say so).
	long := strings.Repeat("a", 300)
	if _, _, err := fx.fs.Open(ctx, file.Uploads, long); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a 300-byte name = %v", err)
	}
	if _, err := fx.fs.Stat(ctx, file.Uploads, "d/"+long+"/x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat under a 300-byte name = %v", err)
	}
	if err := fx.fs.Remove(ctx, file.Uploads, "nope.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove = %v", err)
	}
	if n, err := fx.fs.RemovePrefix(ctx, file.Uploads, "none/"); n != 0 || err != nil {
		t.Errorf("RemovePrefix = %d, %v", n, err)
	}
	if _, err := fx.fs.WriteFile(ctx, file.Uploads, "f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.fs.WriteFile(ctx, file.Uploads, "f/g", []byte("x")); !errors.Is(err, file.ErrNotDir) {
		t.Errorf("WriteFile under a file = %v, want ErrNotDir", err)
	}
	if _, _, err := fx.fs.Open(ctx, file.Uploads, "f/g"); !errors.Is(err, ErrNotFound) || !errors.Is(err, file.ErrNotDir) {
		t.Errorf("Open under a file = %v, want ErrNotFound and ErrNotDir", err)
	}
	missing := New(Dirs{Uploads: filepath.Join(t.TempDir(), "gone")}, Options{})
	if _, err := missing.List(ctx, file.Uploads, "."); !errors.Is(err, ErrNotFound) {
		t.Errorf("List of a missing folder = %v", err)
	}
}

func TestSkillsReadOnly(t *testing.T) {
	fx := newFixture(t, false)
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(fx.dirs.Skills, "SKILL.md"), []byte("# s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.fs.WriteFile(ctx, file.Skills, "x.md", []byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("WriteFile(skills) = %v", err)
	}
	if err := fx.fs.Remove(ctx, file.Skills, "SKILL.md"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Remove(skills) = %v", err)
	}
	if _, err := fx.fs.RemovePrefix(ctx, file.Skills, "S"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("RemovePrefix(skills) = %v", err)
	}
	if b, err := fx.fs.ReadFile(ctx, file.Skills, "SKILL.md", 100); err != nil || string(b) != "# s" {
		t.Errorf("ReadFile(skills) = %q, %v", b, err)
	}
}

func TestListAndReadDir(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		for _, rel := range []string{"b.txt", "a/x.txt", "a/y/z.txt"} {
			if _, err := fx.fs.WriteFile(ctx, file.Outputs, rel, []byte(rel)); err != nil {
				t.Fatal(err)
			}
		}
		list, err := fx.fs.List(ctx, file.Outputs, ".")
		if err != nil {
			t.Fatal(err)
		}
		var rels []string
		for _, i := range list {
			rels = append(rels, i.Rel)
			if i.Size != int64(len(i.Rel)) || i.Created.IsZero() || i.Modified.IsZero() {
				t.Errorf("info %+v", i)
			}
		}
		if strings.Join(rels, ",") != "a/x.txt,a/y/z.txt,b.txt" {
			t.Errorf("List = %v", rels)
		}
		sub, err := fx.fs.List(ctx, file.Outputs, "a/y")
		if err != nil || len(sub) != 1 || sub[0].Rel != "a/y/z.txt" {
			t.Errorf("List(a/y) = %+v, %v", sub, err)
		}
		dir, err := fx.fs.ReadDir(ctx, file.Outputs, "a")
		if err != nil || len(dir) != 2 || dir[0].Rel != "a/x.txt" || dir[1].Rel != "a/y" || !dir[1].Dir {
			t.Errorf("ReadDir(a) = %+v, %v", dir, err)
		}
	})
}

func TestRemovePrefix(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		for _, rel := range []string{"data/2026/a.csv", "data/2026/deep/b.csv", "data/2025/c.csv", "data/20.txt", "other.txt"} {
			if _, err := fx.fs.WriteFile(ctx, file.Uploads, rel, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		n, err := fx.fs.RemovePrefix(ctx, file.Uploads, "data/2026/")
		if err != nil || n != 2 {
			t.Fatalf("RemovePrefix(data/2026/) = %d, %v; want 2", n, err)
		}
		if _, err := os.Stat(filepath.Join(fx.dirs.Uploads, "data", "2026")); !os.IsNotExist(err) {
			t.Errorf("emptied folder data/2026 kept: %v", err)
		}
		n, err = fx.fs.RemovePrefix(ctx, file.Uploads, "data/20")
		if err != nil || n != 2 {
			t.Fatalf("RemovePrefix(data/20) = %d, %v; want 2 (data/2025/c.csv, data/20.txt)", n, err)
		}
		list, _ := fx.fs.List(ctx, file.Uploads, ".")
		if len(list) != 1 || list[0].Rel != "other.txt" {
			t.Errorf("left %+v, want other.txt", list)
		}
	})
}

func TestOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	fx := newFixture(t, false)
	fs := New(fx.dirs, Options{Owner: &Owner{UID: 1234, GID: 1235}})
	if _, err := fs.WriteFile(context.Background(), file.Outputs, "d/f.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d", "d/f.txt"} {
		fi, err := os.Stat(filepath.Join(fx.dirs.Outputs, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1234 || st.Gid != 1235 {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	fx := newFixture(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fx.fs.WriteFile(ctx, file.Outputs, "x", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteFile = %v", err)
	}
	if _, err := fx.fs.List(ctx, file.Outputs, "."); !errors.Is(err, context.Canceled) {
		t.Errorf("List = %v", err)
	}
}

// endless is a reader that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

func TestCopyLarge(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// Several buffers' worth, not a multiple of the buffer, arrives whole
	// and in order.
	want := make([]byte, 3*copyBufferSize+12345)
	for i := range want {
		want[i] = byte(i * 7)
	}
	n, err := copyLarge(out, bytes.NewReader(want))
	if err != nil || n != int64(len(want)) {
		t.Fatalf("copied %d, %v", n, err)
	}
	got, _ := os.ReadFile(out.Name())
	if !bytes.Equal(got, want) {
		t.Fatal("copy differs from its source")
	}

	// A failing write ends the copy with its error instead of reading on.
	ro, err := os.Open(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	done := make(chan error, 1)
	go func() { _, err := copyLarge(ro, endless{}); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("writing to a read-only file succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the copy kept reading after its write failed")
	}

	// A failing read ends it with the read's error.
	boom := errors.New("boom")
	if _, err := copyLarge(out, io.MultiReader(bytes.NewReader(want[:10]), iotest.ErrReader(boom))); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
}

// TestChangesAreSynced: an answer that says a file was written or removed
// must outlive a crash: the folder that names it is synced before the
// answer. Deletes were once answered unsynced, and a journal that aborted
// under a full disk brought a deleted file back. Nothing syncs a whole file
// system: every sync is of one folder or file the change touched, so a
// container's writes never wait for other tenants' on a shared disk.
func TestChangesAreSynced(t *testing.T) {
	fx := newFixture(t, false)
	var synced []uint64
	fx.fs.opts.synced = func(fd int) {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			t.Errorf("sync of a closed descriptor: %v", err)
		}
		synced = append(synced, st.Ino)
	}
	ino := func(path string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	ctx := context.Background()
	check := func(what string, want ...uint64) {
		t.Helper()
		if !slices.Equal(synced, want) {
			t.Fatalf("%s synced inodes %v, want %v", what, synced, want)
		}
		synced = nil
	}
	for _, name := range []string{"data/a.csv", "data/b.csv", "data/2026/c.csv"} {
		if _, err := fx.fs.WriteFile(ctx, file.Uploads, name, []byte("x")); err != nil {
			t.Fatal(err)
		}
		check("a write", ino(filepath.Join(fx.dirs.Uploads, filepath.Dir(name))))
	}
	if err := fx.fs.Remove(ctx, file.Uploads, "data/a.csv"); err != nil {
		t.Fatal(err)
	}
	check("a delete", ino(filepath.Join(fx.dirs.Uploads, "data")))
	// The folder left empty is removed: its parent is synced, once.
	if n, err := fx.fs.RemovePrefix(ctx, file.Uploads, "data/2026/"); err != nil || n != 1 {
		t.Fatalf("prefix delete: %d %v", n, err)
	}
	check("a prefix delete of a folder", ino(filepath.Join(fx.dirs.Uploads, "data")))
	if n, err := fx.fs.RemovePrefix(ctx, file.Uploads, "data/"); err != nil || n != 1 {
		t.Fatalf("prefix delete: %d %v", n, err)
	}
	check("a prefix delete", ino(fx.dirs.Uploads))
	if n, err := fx.fs.RemovePrefix(ctx, file.Uploads, "none/"); err != nil || n != 0 || len(synced) != 0 {
		t.Fatalf("a prefix delete of nothing: %d %v, synced %+v", n, err, synced)
	}
	// An output code wrote: the file, then each folder up to the mount's.
	out := filepath.Join(fx.dirs.Outputs, "charts", "q1", "plot.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte("png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fx.fs.SyncFile(ctx, file.Outputs, "charts/q1/plot.png"); err != nil {
		t.Fatal(err)
	}
	check("a sync of an output", ino(out), ino(filepath.Dir(out)), ino(filepath.Join(fx.dirs.Outputs, "charts")), ino(fx.dirs.Outputs))
}

// TestSyncFileRefusesLinks: SyncFile never follows a symlink code planted,
// at the file or at a folder on its way, and syncs nothing then.
func TestSyncFileRefusesLinks(t *testing.T) {
	fx := newFixture(t, false)
	var synced int
	fx.fs.opts.synced = func(int) { synced++ }
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(fx.dirs.Outputs, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(fx.dirs.Outputs, "dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(fx.dirs.Outputs, "folder"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"link", ErrSymlink},
		{"dir/secret", ErrSymlink},
		{"folder", ErrNotRegular},
		{"missing.txt", ErrNotFound},
		{"../uploads/x", ErrInvalidRel},
		{".", ErrNotRegular},
	} {
		if err := fx.fs.SyncFile(ctx, file.Outputs, tc.rel); !errors.Is(err, tc.want) {
			t.Errorf("SyncFile(%q) = %v, want %v", tc.rel, err, tc.want)
		}
	}
	if synced != 0 {
		t.Fatalf("%d syncs after refusals", synced)
	}
}
