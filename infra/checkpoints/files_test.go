package checkpoints_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/infra/blob"
	"threadbox/infra/checkpoints"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sparse/sparsetest"
)

// s3Bucket connects to the S3-compatible server scripts/s3-start.sh
// started (TEST_BLOB_URL), in a bucket of the test's own. Without one the
// test skips, and fails under CI=true.
func s3Bucket(t *testing.T) *blob.S3 {
	t.Helper()
	raw := os.Getenv("TEST_BLOB_URL")
	if raw == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_BLOB_URL is unset: scripts/test.sh starts the S3-compatible server (scripts/s3-start.sh)")
		}
		t.Skip("TEST_BLOB_URL is unset (eval \"$(scripts/s3-start.sh)\")")
	}
	o, err := blob.ParseS3URL(raw)
	if err != nil {
		t.Fatal(err)
	}
	o.AccessKey, o.SecretKey = os.Getenv("TEST_S3_ACCESS_KEY"), os.Getenv("TEST_S3_SECRET_KEY")
	o.Bucket = fmt.Sprintf("tb-ckpt-files-%d", time.Now().UnixNano()%1e9)
	o.Create, o.Spool = true, t.TempDir()
	s, err := blob.NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countingBlobs counts what a host sends to and fetches from a
// container's namespace.
type countingBlobs struct {
	checkpoints.FileBlobs
	puts, opens *atomic.Int64
}

func (c countingBlobs) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	c.puts.Add(1)
	return c.FileBlobs.Put(ctx, r)
}

func (c countingBlobs) Open(ctx context.Context, sum string) (io.ReadSeekCloser, error) {
	c.opens.Add(1)
	return c.FileBlobs.Open(ctx, sum)
}

// s3Host is one host of a deployment on the S3 store: its own data folder
// and checkpoints carrying the container's files.
type s3Host struct {
	store       *checkpoints.Store
	layout      *hostdirs.Layout
	puts, opens atomic.Int64
}

func newS3Host(t *testing.T, f *fixture, s3 *blob.S3) *s3Host {
	h := &s3Host{layout: hostdirs.New(t.TempDir(), hostdirs.Options{Quota: hostdirs.QuotaNone})}
	archives := func(orgID string) (checkpoints.Blobs, error) {
		return s3.WithPrefix("checkpoint-archives/" + orgID + "/"), nil
	}
	files := func(orgID, id string) (checkpoints.FileBlobs, error) {
		return countingBlobs{s3.WithPrefix("checkpoint-files/" + orgID + "/" + hostdirs.SafeID(id) + "/"), &h.puts, &h.opens}, nil
	}
	h.store = checkpoints.New(h.layout, f.st.Containers(), archives, slog.New(slog.DiscardHandler)).WithFiles(checkpoints.NewFiles(h.layout, files))
	return h
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// blobsOf counts the blobs of the container's files mirror.
func blobsOf(t *testing.T, s3 *blob.S3, orgID, id string) int {
	t.Helper()
	n := 0
	err := s3.WithPrefix("checkpoint-files/"+orgID+"/"+hostdirs.SafeID(id)+"/").Walk(context.Background(), func(string, time.Time) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFilesTravelWithCheckpoints: with the S3 store a checkpoint carries
// its container's files, so a host that never had them restores them with
// it — contents, modes, times and symbolic links; the next checkpoint
// sends only the files that changed and drops the blobs no file uses; the
// first host, restoring that later checkpoint, fetches only what changed
// and loses what was deleted; removing the container removes the mirror.
func TestFilesTravelWithCheckpoints(t *testing.T) {
	ctx := context.Background()
	s3 := s3Bucket(t)
	f := newFixture(t)
	c := f.container(t, "acme")
	a, b := newS3Host(t, f, s3), newS3Host(t, f, s3)

	da, err := a.layout.Prepare(ctx, c.ID())
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	write(t, filepath.Join(da.Workspace, "notes.txt"), "first")
	write(t, filepath.Join(da.Workspace, "data", "big.bin"), string(big))
	write(t, filepath.Join(da.Outputs, "report.md"), "# report")
	write(t, filepath.Join(da.Uploads, "in.csv"), "a,b\n1,2\n")
	write(t, filepath.Join(da.Workspace, "run.sh"), "#!/bin/sh\necho hi\n")
	if err := os.Chmod(filepath.Join(da.Workspace, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes.txt", filepath.Join(da.Workspace, "latest")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(da.Uploads, "in.csv"), old, old); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, a.store, c, "first life")
	if n := a.puts.Load(); n != 5 {
		t.Fatalf("first checkpoint sent %d files, want 5", n)
	}

	// Another host, which never had the container's folders, restores.
	dir, _, ok, err := b.store.Checkpoint(ctx, c.ID())
	if err != nil || !ok || read(t, filepath.Join(dir, "checkpoint.img")) != "first life" {
		t.Fatalf("on another host: %v %v", ok, err)
	}
	db := b.layout.Dirs(c.ID())
	if read(t, filepath.Join(db.Workspace, "notes.txt")) != "first" || read(t, filepath.Join(db.Workspace, "data", "big.bin")) != string(big) ||
		read(t, filepath.Join(db.Outputs, "report.md")) != "# report" || read(t, filepath.Join(db.Uploads, "in.csv")) != "a,b\n1,2\n" {
		t.Fatal("the other host's files are not the container's")
	}
	if fi, err := os.Stat(filepath.Join(db.Workspace, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode on the other host: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(db.Uploads, "in.csv")); err != nil || !fi.ModTime().Equal(old) {
		t.Fatalf("time on the other host: %v %v", fi.ModTime(), err)
	}
	if l, err := os.Readlink(filepath.Join(db.Workspace, "latest")); err != nil || l != "notes.txt" {
		t.Fatalf("symbolic link on the other host: %q %v", l, err)
	}
	if n := b.opens.Load(); n != 5 {
		t.Fatalf("the other host fetched %d files, want 5", n)
	}

	// Work there, then its idle stop: only what changed is sent.
	write(t, filepath.Join(db.Workspace, "notes.txt"), "second, longer")
	write(t, filepath.Join(db.Workspace, "new.txt"), "new")
	if err := os.Remove(filepath.Join(db.Outputs, "report.md")); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, b.store, c, "second life")
	if n := b.puts.Load(); n != 2 {
		t.Fatalf("the incremental checkpoint sent %d files, want 2 (the changed and the new one)", n)
	}
	if n := blobsOf(t, s3, c.OrgID(), c.ID()); n != 5 {
		t.Fatalf("blobs of the mirror after the second checkpoint: %d, want 5 (unused ones removed)", n)
	}

	// The first host restores the later checkpoint: only the changed
	// files are fetched, the deleted one goes.
	a.opens.Store(0)
	if _, _, ok, err := a.store.Checkpoint(ctx, c.ID()); err != nil || !ok {
		t.Fatalf("first host: %v %v", ok, err)
	}
	if read(t, filepath.Join(da.Workspace, "notes.txt")) != "second, longer" || read(t, filepath.Join(da.Workspace, "new.txt")) != "new" {
		t.Fatal("the first host's files are not the later checkpoint's")
	}
	if _, err := os.Stat(filepath.Join(da.Outputs, "report.md")); !os.IsNotExist(err) {
		t.Fatalf("a file deleted before the later checkpoint is still on the first host: %v", err)
	}
	if n := a.opens.Load(); n != 2 {
		t.Fatalf("the first host fetched %d files, want 2", n)
	}

	if err := a.store.DropCheckpoint(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if n := blobsOf(t, s3, c.OrgID(), c.ID()); n != 5 {
		t.Fatalf("a used checkpoint took the files mirror with it: %d blobs left", n)
	}
	if err := a.store.DropFiles(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if n := blobsOf(t, s3, c.OrgID(), c.ID()); n != 0 {
		t.Fatalf("blobs left after the container's removal: %d", n)
	}
}

// TestFilesMirrorStaysInside: a manifest naming a path outside the
// container's mirrored folders, or one beyond a symbolic link, is refused
// and writes nothing outside.
func TestFilesMirrorStaysInside(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	layout := hostdirs.New(t.TempDir(), hostdirs.Options{Quota: hostdirs.QuotaNone})
	files := checkpoints.NewFiles(layout, func(string, string) (checkpoints.FileBlobs, error) {
		return blob.New(t.TempDir()), nil
	})
	for _, entries := range [][]checkpoints.Entry{
		{{Path: "workspace/../../escape", Mode: 0o644, SHA256: strings.Repeat("0", 64)}},
		{{Path: "skills/x", Mode: 0o644, SHA256: strings.Repeat("0", 64)}},
		{{Path: "workspace/l", Mode: os.ModeSymlink | 0o777, Link: outside}, {Path: "workspace/l/escape", Mode: 0o644, SHA256: strings.Repeat("0", 64)}},
	} {
		dir := t.TempDir()
		b, _ := json.Marshal(checkpoints.Manifest{Entries: entries})
		write(t, filepath.Join(dir, "threadbox-files.json"), string(b))
		if _, err := files.Apply(ctx, "org_a", "thr_a", dir); err == nil {
			t.Errorf("%+v applied", entries)
		}
		if left, _ := os.ReadDir(outside); len(left) != 0 {
			t.Fatalf("%+v wrote outside: %v", entries, left)
		}
	}
}

// TestFilesApplyNeverWritesThroughALink: a symbolic link the sandbox left
// in its folders, named as the temporary file Apply writes a fetched file
// under, is replaced, never followed: the file's content lands in the
// container's folder and nothing is written where the link points.
func TestFilesApplyNeverWritesThroughALink(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	target := filepath.Join(outside, "victim")
	write(t, target, "the host's own")
	layout := hostdirs.New(t.TempDir(), hostdirs.Options{Quota: hostdirs.QuotaNone})
	d, err := layout.Prepare(ctx, "thr_a")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d.Workspace, "x"), "old")
	if err := os.Symlink(target, filepath.Join(d.Workspace, "x.threadbox-part")); err != nil {
		t.Fatal(err)
	}
	store := blob.New(t.TempDir())
	sum, n, err := store.Put(ctx, strings.NewReader("from the sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	files := checkpoints.NewFiles(layout, func(string, string) (checkpoints.FileBlobs, error) { return store, nil })
	dir := t.TempDir()
	b, _ := json.Marshal(checkpoints.Manifest{Entries: []checkpoints.Entry{
		{Path: "workspace", Mode: os.ModeDir | 0o755},
		{Path: "workspace/x", Mode: 0o644, Size: n, MTime: time.Now().UnixNano(), SHA256: sum},
	}})
	write(t, filepath.Join(dir, "threadbox-files.json"), string(b))
	if _, err := files.Apply(ctx, "org_a", "thr_a", dir); err != nil {
		t.Fatal(err)
	}
	if got := read(t, target); got != "the host's own" {
		t.Fatalf("Apply wrote through the sandbox's link: the host file now holds %q", got)
	}
	if got := read(t, filepath.Join(d.Workspace, "x")); got != "from the sandbox" {
		t.Fatalf("the container's file holds %q", got)
	}
}

// boundedBlobs refuses a blob longer than limit bytes, so that a mirror
// that sends more fails at once rather than filling the disk.
type boundedBlobs struct {
	checkpoints.FileBlobs
	limit int64
}

func (b boundedBlobs) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	return b.FileBlobs.Put(ctx, &boundedReader{r: r, left: b.limit})
}

type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return 0, errors.New("the blob is past the test's bound")
	}
	return n, err
}

// TestFilesMirrorKeepsSparseFilesSparse: a file of 1 TiB with a few bytes
// written (code in a sandbox makes one with truncate, at no cost to its
// disk quota) is mirrored as what it holds: the manifest names its blob
// as extents, not as a SHA-256 of its content, the blob store keeps a few
// bytes for it, and a host that never had it restores it with its size,
// content and modification time, sparse; the next mirror, with nothing
// changed, sends nothing and restores the same.
func TestFilesMirrorKeepsSparseFilesSparse(t *testing.T) {
	ctx := context.Background()
	blobDir := t.TempDir()
	store := blob.New(blobDir)
	host := func() (*checkpoints.Files, hostdirs.Dirs) {
		t.Helper()
		layout := hostdirs.New(t.TempDir(), hostdirs.Options{Quota: hostdirs.QuotaNone})
		d, err := layout.Prepare(ctx, "thr_a")
		if err != nil {
			t.Fatal(err)
		}
		return checkpoints.NewFiles(layout, func(string, string) (checkpoints.FileBlobs, error) {
			return boundedBlobs{store, 1 << 20}, nil
		}), d
	}
	files, da := host()
	const size = 1 << 40
	p := filepath.Join(da.Workspace, "huge.bin")
	sparsetest.Make(t, p, size, sparsetest.Piece{Off: 0, Data: "head"}, sparsetest.Piece{Off: size / 2, Data: "middle"}, sparsetest.Piece{Off: size - 4, Data: "tail"})
	write(t, filepath.Join(da.Workspace, "note.txt"), "dense")
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	// restored checks the file a host restored from the checkpoint folder
	// dir.
	restored := func(dir string) {
		t.Helper()
		to, db := host()
		sparsetest.Within(t, 2*time.Minute, func() error { _, err := to.Apply(ctx, "org_a", "thr_a", dir); return err })
		q := filepath.Join(db.Workspace, "huge.bin")
		fi, err := os.Stat(q)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != size || !fi.ModTime().Equal(mtime) {
			t.Fatalf("restored: %d bytes, modified %v", fi.Size(), fi.ModTime())
		}
		if n := sparsetest.Allocated(t, q); n > 1<<20 {
			t.Fatalf("the restored file takes %d bytes", n)
		}
		g, err := os.Open(q)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for off, s := range map[int64]string{0: "head", size / 2: "middle", size - 4: "tail", size / 4: "\x00\x00\x00"} {
			b := make([]byte, len(s))
			if _, err := g.ReadAt(b, off); err != nil || string(b) != s {
				t.Errorf("restored at %d: %q, want %q (%v)", off, b, s, err)
			}
		}
		if got := read(t, filepath.Join(db.Workspace, "note.txt")); got != "dense" {
			t.Errorf("note.txt holds %q", got)
		}
	}
	first := t.TempDir()
	sparsetest.Within(t, 2*time.Minute, func() error {
		pending, err := files.Mirror(ctx, "org_a", "thr_a", first)
		if err != nil {
			return err
		}
		return pending.Commit(ctx)
	})
	var m checkpoints.Manifest
	if err := json.Unmarshal([]byte(read(t, filepath.Join(first, "threadbox-files.json"))), &m); err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Entries {
		if sparse := e.Path == "workspace/huge.bin"; e.Mode.IsRegular() && (sparse != (e.Extents != "") || sparse == (e.SHA256 != "")) {
			t.Errorf("manifest entry %+v", e)
		}
	}
	var stored int64
	_ = filepath.WalkDir(blobDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				stored += fi.Size()
			}
		}
		return nil
	})
	if stored > 64<<10 {
		t.Fatalf("the blob store holds %d bytes for a file of %d bytes with 14 written", stored, int64(size))
	}
	restored(first)
	second := t.TempDir()
	var sent int
	sparsetest.Within(t, 2*time.Minute, func() error {
		pending, err := files.Mirror(ctx, "org_a", "thr_a", second)
		sent = pending.Sent
		return err
	})
	if sent != 0 {
		t.Fatalf("an unchanged mirror sent %d files", sent)
	}
	restored(second)
}
