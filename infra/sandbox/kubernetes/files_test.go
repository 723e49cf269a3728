package kubernetes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"
	k8s "threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/sandbox/kubernetes/k8stest"
	"threadbox/infra/sandbox/sandboxtest"
)

// bootLife boots a sandbox of the default mounts before each file
// operation, as app/containers does for threadbox.
type bootLife struct{ be *k8s.Backend }

func (l bootLife) Use(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	if err := l.be.Ensure(ctx, sandbox.Spec{ID: id}); err != nil {
		return err
	}
	return fn(ctx)
}

// failingReader yields some bytes, then an error.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(p), r.n)
	clear(p[:k])
	r.n -= k
	return k, nil
}

// cancellingReader yields n zero bytes and cancels its caller's context
// once at bytes have been read.
type cancellingReader struct {
	n, at, read int
	cancel      func()
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if r.read >= r.n {
		return 0, io.EOF
	}
	k := min(len(p), r.n-r.read)
	clear(p[:k])
	r.read += k
	if r.read >= r.at {
		r.cancel()
	}
	return k, nil
}

// TestFilesThroughThePod: in storage-class mode (claims on a provisioned
// class, out of threadbox's reach) threadbox's file operations go through
// the pod's files sidecar: an upload to a container whose sandbox never ran
// boots it and code reads the bytes; code cannot write the upload; what
// code writes to outputs reads back; files survive an idle stop; symlinks
// out of the mounts are refused and fsroot's errors come back as its
// values.
func TestFilesThroughThePod(t *testing.T) {
	c := newCluster(t)
	class := k8stest.Provisioner(t, c.cs, c.ns)
	be := c.backend(t, "files", func(cfg *k8s.Config) {
		cfg.HostPathVolumes = false
		cfg.StorageClass = class
	})
	fs := k8s.NewFiles(be, bootLife{be})
	id := "ctr-files"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sandboxtest.Cleanup(t, func() { _ = be.Remove(context.Background(), id) })

	// 3 MiB: more than the write window's progress step and the in-memory
	// limit of an opened file.
	data := make([]byte, 3<<20+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	info, err := fs.Write(ctx, id, "/mnt/user-data/uploads/in/data.bin", bytes.NewReader(data), -1)
	if err != nil {
		t.Fatalf("upload to a container never booted: %v", err)
	}
	if info.Size != int64(len(data)) || info.Rel != "in/data.bin" {
		t.Errorf("upload info %+v", info)
	}
	if got := sh(t, be, id, "sha256sum /mnt/user-data/uploads/in/data.bin | cut -d' ' -f1"); got != hex.EncodeToString(sum[:]) {
		t.Errorf("code sees the upload with sha256 %s, want %s", got, hex.EncodeToString(sum[:]))
	}
	if got := sh(t, be, id, "echo x > /mnt/user-data/uploads/in/data.bin 2>/dev/null && echo wrote || echo refused"); got != "refused" {
		t.Errorf("code writing the upload: %s", got)
	}

	sh(t, be, id, "mkdir -p /mnt/user-data/outputs/sub && printf 'made by code' > /mnt/user-data/outputs/sub/out.txt")
	rc, info, err := fs.Open(ctx, id, "/mnt/user-data/outputs/sub/out.txt")
	if err != nil {
		t.Fatalf("open an output: %v", err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "made by code" || info.Size != 12 {
		t.Errorf("output %q, info %+v", b, info)
	}
	walk, err := fs.Walk(ctx, id, "/mnt/user-data/outputs")
	if err != nil || len(walk) != 1 || walk[0].Rel != "sub/out.txt" {
		t.Errorf("walk outputs: %+v %v", walk, err)
	}

	// An idle stop deletes the pod; the claim keeps the files and the
	// next operation boots a pod again.
	if err := be.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	rc, _, err = fs.Open(ctx, id, "/mnt/user-data/uploads/in/data.bin")
	if err != nil {
		t.Fatalf("open the upload after an idle stop: %v", err)
	}
	h := sha256.New()
	_, _ = io.Copy(h, rc)
	rc.Close()
	if !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Error("the upload read back after an idle stop differs")
	}
	if b, err := fs.ReadFile(ctx, id, "/mnt/user-data/outputs/sub/out.txt", 100); err != nil || string(b) != "made by code" {
		t.Errorf("output after an idle stop: %q %v", b, err)
	}

	// Confinement: symlinks out of the mounts are refused, never followed.
	sh(t, be, id, "ln -s /etc/passwd /mnt/user-data/outputs/passwd && ln -s / /mnt/user-data/outputs/root && ln -s /mnt/user-data/uploads /mnt/user-data/outputs/up")
	for _, p := range []string{"/mnt/user-data/outputs/passwd", "/mnt/user-data/outputs/root/etc/passwd"} {
		if _, _, err := fs.Open(ctx, id, p); !errors.Is(err, file.ErrSymlink) {
			t.Errorf("open %s: %v, want ErrSymlink", p, err)
		}
	}
	if _, err := fs.Write(ctx, id, "/mnt/user-data/outputs/up/evil", strings.NewReader("x"), -1); !errors.Is(err, file.ErrSymlink) {
		t.Errorf("write through a symlinked folder: %v, want ErrSymlink", err)
	}
	if err := fs.Remove(ctx, id, "/mnt/user-data/outputs/passwd"); err != nil {
		t.Errorf("remove a symlink: %v", err)
	}
	if got := sh(t, be, id, "test -L /mnt/user-data/outputs/passwd && echo link; head -c4 /etc/passwd"); got != "root" {
		t.Errorf("after removing the link: %q (the link gone, its target kept)", got)
	}

	// fsroot's error values, across the pod.
	if _, err := fs.Stat(ctx, id, "/mnt/user-data/outputs/missing"); !errors.Is(err, file.ErrNotFound) {
		t.Errorf("stat a missing file: %v", err)
	}
	var me *file.MountError
	if _, err := fs.Write(ctx, id, "/etc/evil", strings.NewReader("x"), -1); !errors.As(err, &me) || !errors.Is(err, file.ErrNoMount) {
		t.Errorf("write outside the mounts: %v", err)
	}
	if _, err := fs.Write(ctx, id, "/mnt/user-data/outputs/big", strings.NewReader("0123456789"), 5); !errors.Is(err, file.ErrTooLarge) {
		t.Errorf("write past the limit: %v", err)
	}
	if _, _, err := fs.Open(ctx, id, "/mnt/user-data/outputs/sub"); !errors.Is(err, file.ErrNotRegular) {
		t.Errorf("open a folder: %v", err)
	}
	// A write whose source fails stores nothing, and an earlier file at
	// the path stays as it was.
	if _, err := fs.Write(ctx, id, "/mnt/user-data/outputs/sub/out.txt", &failingReader{n: 600 << 10}, -1); err == nil {
		t.Error("a write whose source failed succeeded")
	}
	if b, err := fs.ReadFile(ctx, id, "/mnt/user-data/outputs/sub/out.txt", 100); err != nil || string(b) != "made by code" {
		t.Errorf("after a failed replace: %q %v", b, err)
	}
	// A caller that goes mid-upload: nothing stored, nothing left behind.
	cctx, ccancel := context.WithCancel(ctx)
	if _, err := fs.Write(cctx, id, "/mnt/user-data/outputs/sub/gone.bin", &cancellingReader{n: 6 << 20, at: 1 << 20, cancel: ccancel}, -1); !errors.Is(err, context.Canceled) {
		t.Errorf("a write whose caller went: %v", err)
	}
	if got := sh(t, be, id, "ls -A /mnt/user-data/outputs/sub"); got != "out.txt" {
		t.Errorf("failed writes left files behind: %q", got)
	}
	list, err := fs.List(ctx, id, "/mnt/user-data/outputs")
	var names []string
	for _, e := range list {
		names = append(names, e.Rel)
	}
	if err != nil || !slices.Contains(names, "sub") {
		t.Errorf("list outputs: %v %v", names, err)
	}
	if n, err := fs.RemovePrefix(ctx, id, file.Uploads, "in/"); err != nil || n != 1 {
		t.Errorf("remove prefix: %d %v", n, err)
	}
	if got := sh(t, be, id, "ls -A /mnt/user-data/uploads/in | wc -l"); got != "0" {
		t.Errorf("uploads after remove prefix: %s", got)
	}
}

// twoPods starts the sandboxes of two containers, ctr-NAME-from and
// ctr-NAME-to, on a backend of the test cluster whose volumes are claims
// (out of threadbox's reach), removed at the end of the test, and returns
// the backend, its file access and a context that bounds the test.
func twoPods(t *testing.T, name string) (be *k8s.Backend, fs *k8s.Files, from, to string, ctx context.Context) {
	t.Helper()
	c := newCluster(t)
	class := k8stest.Provisioner(t, c.cs, c.ns)
	be = c.backend(t, name, func(cfg *k8s.Config) {
		cfg.HostPathVolumes = false
		cfg.StorageClass = class
	})
	fs = k8s.NewFiles(be, bootLife{be})
	from, to = "ctr-"+name+"-from", "ctr-"+name+"-to"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	for _, id := range []string{from, to} {
		sandboxtest.Cleanup(t, func() { _ = be.Remove(context.Background(), id) })
		if err := be.Ensure(ctx, sandbox.Spec{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	return be, fs, from, to, ctx
}

// TestCopyFileKeepsHoles: a fork's copy of a sparse file through the pods
// (code made it with `truncate -s 1T`) goes by its data: the copy in the
// other container has the file's size and bytes, takes a few blocks of its
// volume, and its data counts against the limit. A limit below the data
// refuses the copy and leaves nothing behind.
func TestCopyFileKeepsHoles(t *testing.T) {
	be, fs, from, to, ctx := twoPods(t, "copy")
	const p = "/mnt/user-data/outputs/disk.img"
	const size = int64(1) << 40
	sh(t, be, from, "f="+p+"; truncate -s 1T $f && printf head | dd of=$f conv=notrunc status=none"+
		" && printf middle | dd of=$f bs=1 seek=549755813888 conv=notrunc status=none"+
		" && printf tail | dd of=$f bs=1 seek=1099511627772 conv=notrunc status=none")
	const low, high = int64(len("headmiddletail")), int64(1 << 20)

	info, n, err := fs.CopyFile(ctx, from, to, p, high)
	if err != nil {
		t.Fatalf("copy a sparse file: %v", err)
	}
	if info.Size != size || n < low || n > high {
		t.Errorf("the copy: %+v with %d bytes of data, want %d bytes with %d to %d of data", info, n, size, low, high)
	}
	if got, err := strconv.ParseInt(sh(t, be, to, "echo $(( $(stat -c '%b * %B' "+p+") ))"), 10, 64); err != nil || got > high {
		t.Errorf("the copy takes %d bytes of its volume (%v), its holes filled", got, err)
	}
	if got := sh(t, be, to, "f="+p+"; stat -c %s $f; head -c4 $f; echo; dd if=$f bs=1 skip=549755813888 count=6 status=none; echo; tail -c4 $f; echo;"+
		" dd if=$f bs=65536 skip=4096 count=1 status=none | tr -d '\\0' | wc -c"); got != "1099511627776\nhead\nmiddle\ntail\n0" {
		t.Errorf("the copy reads %q", got)
	}

	const q = "/mnt/user-data/outputs/refused.img"
	sh(t, be, from, "truncate -s 1T "+q+" && printf headmiddletail | dd of="+q+" conv=notrunc status=none")
	if _, _, err := fs.CopyFile(ctx, from, to, q, low-1); !errors.Is(err, file.ErrTooLarge) {
		t.Errorf("a copy over the limit of data: %v, want ErrTooLarge", err)
	}
	if got := sh(t, be, to, "ls -A /mnt/user-data/outputs"); got != "disk.img" {
		t.Errorf("the refused copy left %q", got)
	}
}

// TestCopyFileOlderAgent: a target whose agent refuses the extent write
// (an agent image older than it refuses an operation it does not know)
// gets the file whole through threadbox, holes written as zeros, with
// its bytes and size.
func TestCopyFileOlderAgent(t *testing.T) {
	be, fs, from, to, ctx := twoPods(t, "copyold")
	fs.SetWriteExtentsOp("write-extents-unknown")
	const p = "/mnt/user-data/outputs/small.img"
	const size = 8 << 20
	sh(t, be, from, "truncate -s 8M "+p+" && printf tail | dd of="+p+" bs=1 seek=8388604 conv=notrunc status=none")
	info, n, err := fs.CopyFile(ctx, from, to, p, -1)
	if err != nil {
		t.Fatalf("copy to an older agent: %v", err)
	}
	if info.Size != size || n != size {
		t.Errorf("the copy: %+v with %d bytes stored, want %d written whole", info, n, size)
	}
	if got := sh(t, be, to, "stat -c %s "+p+"; tail -c4 "+p+"; echo; head -c 8388604 "+p+" | tr -d '\\0' | wc -c"); got != "8388608\ntail\n0" {
		t.Errorf("the copy reads %q", got)
	}
}

// TestOpenOlderAgent: a pod whose agent refuses the extent read (an agent
// image older than it refuses an operation it does not know) still gives
// Open and ReadFile the file's bytes, read whole with its holes as zeros,
// small ones and ones beyond what is held in memory; a copy from that pod
// to another gets the same bytes.
func TestOpenOlderAgent(t *testing.T) {
	be, fs, from, to, ctx := twoPods(t, "openold")
	fs.TempDir = t.TempDir()
	fs.SetOpenExtentsOp("open-extents-unknown")
	const small = "/mnt/user-data/outputs/small.txt"
	const big = "/mnt/user-data/outputs/big.img"
	const bigSize = 3 << 20
	sh(t, be, from, "printf 'hello, old agent' > "+small+
		" && printf head > "+big+" && truncate -s 3M "+big+
		" && printf tail | dd of="+big+" bs=1 seek=3145724 conv=notrunc status=none")
	wantBig := make([]byte, bigSize)
	copy(wantBig, "head")
	copy(wantBig[bigSize-4:], "tail")
	for _, tc := range []struct {
		path string
		want []byte
	}{{small, []byte("hello, old agent")}, {big, wantBig}} {
		rc, info, err := fs.Open(ctx, from, tc.path)
		if err != nil {
			t.Fatalf("open %s from an older agent: %v", tc.path, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read %s: %v", tc.path, err)
		}
		if info.Size != int64(len(tc.want)) || !bytes.Equal(got, tc.want) {
			t.Errorf("open %s: size %d, %d bytes read (equal: %v), want %d", tc.path, info.Size, len(got), bytes.Equal(got, tc.want), len(tc.want))
		}
		got, err = fs.ReadFile(ctx, from, tc.path, bigSize)
		if err != nil {
			t.Fatalf("read file %s from an older agent: %v", tc.path, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("read file %s: %d bytes (equal: false), want %d", tc.path, len(got), len(tc.want))
		}
	}
	info, n, err := fs.CopyFile(ctx, from, to, big, -1)
	if err != nil {
		t.Fatalf("copy from an older agent: %v", err)
	}
	if info.Size != bigSize || n != bigSize {
		t.Errorf("the copy: %+v with %d bytes stored, want %d written whole", info, n, bigSize)
	}
	if got := sh(t, be, to, "stat -c %s "+big+"; head -c4 "+big+"; echo; tail -c4 "+big); got != "3145728\nhead\ntail" {
		t.Errorf("the copy reads %q", got)
	}
}
