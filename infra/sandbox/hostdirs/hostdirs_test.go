package hostdirs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

func TestSafeID(t *testing.T) {
	tests := []struct {
		id       string
		same     bool   // maps to itself
		contains string // readable prefix kept
	}{
		{"thread-123", true, ""},
		{"u1--my-container", true, ""},
		{"0f8e2c1a-6c1b-4c5e-9d4e-1b2c3d4e5f60", true, ""},
		{"../etc", false, "etc"},
		{"a/b", false, "a_b"},
		{"..", false, ""},
		{".hidden", false, "hidden"},
		{"", false, ""},
		{"with space", false, "with_space"},
		{strings.Repeat("x", 101), false, strings.Repeat("x", 48)},
	}
	for _, tt := range tests {
		got := SafeID(tt.id)
		if tt.same != (got == tt.id) {
			t.Errorf("SafeID(%q) = %q, same=%v", tt.id, got, tt.same)
		}
		if !safePattern.MatchString(got) || strings.Contains(got, "..") || strings.Contains(got, "/") {
			t.Errorf("SafeID(%q) = %q is not a safe name", tt.id, got)
		}
		if !strings.Contains(got, tt.contains) {
			t.Errorf("SafeID(%q) = %q lost its prefix %q", tt.id, got, tt.contains)
		}
	}
	if SafeID("a/b") == SafeID("a_b") || SafeID("a/b") == SafeID("a:b") {
		t.Error("distinct ids share a safe name")
	}
}

func TestPrepareLayout(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	l := New(data, Options{})
	d, err := l.Prepare(ctx, "thread-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Root != filepath.Join(data, "containers", "thread-1") {
		t.Errorf("root = %s", d.Root)
	}
	for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Errorf("%s: not a folder (%v)", p, err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.Workspace, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prepare(ctx, "thread-1"); err != nil {
		t.Fatalf("second prepare: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Workspace, "f")); err != nil {
		t.Errorf("prepare lost a file: %v", err)
	}
	m := d.Mounts()
	want := map[string]bool{sandbox.WorkspaceDir: false, sandbox.UploadsDir: true, sandbox.OutputsDir: false, sandbox.SkillsDir: true}
	if len(m) != len(want) {
		t.Fatalf("mounts = %v", m)
	}
	for _, mt := range m {
		if ro, ok := want[mt.Target]; !ok || ro != mt.ReadOnly {
			t.Errorf("mount %+v: want read-only=%v", mt, ro)
		}
	}
	if err := l.Remove(ctx, "thread-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("root still there: %v", err)
	}
}

func TestQuotaLoopStopsWrites(t *testing.T) {
	if os.Getuid() != 0 || exec.Command("mkfs.ext4", "-V").Run() != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("loop quota needs root and mkfs.ext4")
		}
		t.Skip("loop quota needs root and mkfs.ext4")
	}
	ctx := context.Background()
	l := New(t.TempDir(), Options{Quota: QuotaLoop, DiskBytes: 32 << 20})
	t.Cleanup(func() { _ = l.Remove(context.Background(), "q") })
	d, err := l.Prepare(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := isMountPoint(d.Root); !ok {
		t.Fatal("quota file system not mounted")
	}
	f, err := os.Create(filepath.Join(d.Workspace, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	written := 0
	for written < 64<<20 {
		n, err := f.Write(buf)
		written += n
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write error %v, want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if written >= 64<<20 || written < 16<<20 {
		t.Fatalf("wrote %d bytes into a 32 MiB quota", written)
	}
	// Release and Prepare keep the files (a remount, as after a host reboot).
	if err := l.Release(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Workspace, "fill")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file visible while unmounted: %v", err)
	}
	if _, err := l.Prepare(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Workspace, "fill")); err != nil {
		t.Fatalf("file lost across remount: %v", err)
	}
	// The host's view of what is mounted and attached below the data
	// folder: one mount and its loop device, then nothing once removed.
	data := filepath.Dir(filepath.Dir(d.Root))
	if m, err := MountsBelow(data); err != nil || len(m) != 1 || m[0] != d.Root {
		t.Fatalf("mounts below %s: %v %v", data, m, err)
	}
	if loops := LoopsBelow(data); len(loops) != 1 {
		t.Fatalf("loop devices below %s: %v", data, loops)
	}
	if err := l.Remove(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if m, _ := MountsBelow(data); len(m) != 0 {
		t.Fatalf("mounts after removal: %v", m)
	}
	// The kernel detaches an autoclear loop device on its last close.
	for deadline := time.Now().Add(5 * time.Second); len(LoopsBelow(data)) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("loop devices after removal: %v", LoopsBelow(data))
		}
	}
}

// TestRepairReadOnlyQuota: a quota file system that went read-only (as
// its image does after I/O errors when the disk under it fills) makes
// Prepare fail with sandbox.ErrFoldersReadOnly instead of a chmod error;
// Repair checks the image and mounts it again writable, files kept.
func TestRepairReadOnlyQuota(t *testing.T) {
	needLoopQuota(t)
	ctx := context.Background()
	l := New(t.TempDir(), Options{Quota: QuotaLoop, DiskBytes: 32 << 20})
	t.Cleanup(func() { _ = l.Remove(context.Background(), "ro") })
	d, err := l.Prepare(ctx, "ro")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Outputs, "kept.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", d.Root).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v: %s", err, out)
	}
	if _, err := l.Prepare(ctx, "ro"); !errors.Is(err, sandbox.ErrFoldersReadOnly) {
		t.Fatalf("Prepare on a read-only quota: %v, want ErrFoldersReadOnly", err)
	}
	if err := l.Repair(ctx, "ro"); err != nil {
		t.Fatalf("repair: %v", err)
	}
	if _, err := l.Prepare(ctx, "ro"); err != nil {
		t.Fatalf("Prepare after the repair: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Outputs, "kept.txt")); err != nil || string(b) != "kept" {
		t.Fatalf("file after the repair: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(d.Workspace, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatalf("write after the repair: %v", err)
	}
	if m, err := MountsBelow(filepath.Dir(filepath.Dir(d.Root))); err != nil || len(m) != 1 {
		t.Fatalf("mounts after the repair: %v %v", m, err)
	}
	// A journal that aborted refuses writes (EROFS) without always
	// flagging its mount read-only: that is read-only folders too.
	if err := readOnlyErr("ro", fmt.Errorf("chmod: %w", syscall.EROFS)); !errors.Is(err, sandbox.ErrFoldersReadOnly) {
		t.Fatalf("EROFS: %v", err)
	}
	if err := readOnlyErr("ro", fmt.Errorf("chmod: %w", syscall.EACCES)); errors.Is(err, sandbox.ErrFoldersReadOnly) {
		t.Fatalf("EACCES taken for read-only folders: %v", err)
	}
	// Without quotas there is nothing to repair.
	if err := New(t.TempDir(), Options{}).Repair(ctx, "x"); err != nil {
		t.Fatalf("repair without quotas: %v", err)
	}
}

// TestLocksAreDropped: the per-container locks live only while in use.
func TestLocksAreDropped(t *testing.T) {
	l := New(t.TempDir(), Options{})
	ctx := context.Background()
	for i := range 50 {
		id := fmt.Sprint("c", i)
		if _, err := l.Prepare(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := l.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.locks.InUse(); n != 0 {
		t.Fatalf("%d locks kept after every container was removed", n)
	}
}

// TestRepairWaitsForRoom: a repair while the disk under the image has no
// room for the image's holes fails as the server's full disk and leaves the
// image alone — e2fsck meeting a full disk clears a journal it could not
// replay, losing acknowledged writes. With room again it repairs, and the
// image is sparse afterwards.
func TestRepairWaitsForRoom(t *testing.T) {
	needLoopQuota(t)
	ctx := context.Background()
	disk := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })
	l := New(filepath.Join(disk, "data"), Options{Quota: QuotaLoop, DiskBytes: 32 << 20})
	t.Cleanup(func() { _ = l.Remove(context.Background(), "full") })
	d, err := l.Prepare(ctx, "full")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Uploads, "kept.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", d.Root).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v: %s", err, out)
	}
	img := l.DiskImage("full")
	before, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the disk but for 4 MiB: less than the image's holes.
	var st unix.Statfs_t
	if err := unix.Statfs(disk, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(disk, "filler")
	if out, err := exec.Command("fallocate", "-l", fmt.Sprint(int64(st.Bavail)*st.Bsize-4<<20), filler).CombinedOutput(); err != nil {
		t.Fatalf("fill: %v: %s", err, out)
	}
	if err := l.Repair(ctx, "full"); !errors.Is(err, file.ErrServerDiskFull) {
		t.Fatalf("repair on a full disk: %v, want file.ErrServerDiskFull", err)
	}
	after, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if allocated(after) != allocated(before) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the image changed on a full disk: %d bytes allocated at %v, before %d at %v", allocated(after), after.ModTime(), allocated(before), before.ModTime())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := l.Repair(ctx, "full"); err != nil {
		t.Fatalf("repair with room: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Uploads, "kept.txt")); err != nil || string(b) != "kept" {
		t.Fatalf("file after the repair: %q %v", b, err)
	}
	if fi, err := os.Stat(img); err != nil || allocated(fi) > fi.Size()/2 {
		t.Fatalf("image after the repair: %d of %d bytes allocated (%v), want it sparse again", allocated(fi), fi.Size(), err)
	}
}

// TestOrphans: folders and disk images no container claims, unchanged for
// a while, are orphans; a claimed one, or one changed or prepared
// recently, is not.
func TestOrphans(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := New(dir, Options{})
	for _, id := range []string{"live", "gone", "fresh"} {
		if _, err := l.Prepare(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// A disk image left without its folder.
	if err := os.MkdirAll(filepath.Join(dir, "disks"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "disks", "image-only.ext4"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// An image half made by a server killed while it made it, and one of
	// a live container's.
	for _, p := range []string{"half-made.ext4.tmp", "gone.ext4.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, "disks", p), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{"containers/live", "containers/gone", "disks/image-only.ext4", "disks/half-made.ext4.tmp", "disks/gone.ext4.tmp"} {
		if err := os.Chtimes(filepath.Join(dir, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	l.mu.Lock()
	for _, name := range []string{"live", "gone"} {
		l.used[name] = use{id: name, at: old}
	}
	l.mu.Unlock()
	got, err := l.Orphans(ctx, []string{"live"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"gone", "half-made", "image-only"}) {
		t.Fatalf("orphans %v, want [gone half-made image-only]", got)
	}
	for _, name := range got {
		if err := l.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "disks")); len(ents) != 0 {
		t.Fatalf("disks after the removal: %v, want none", ents)
	}
	if got, _ := l.Orphans(ctx, []string{"live"}, 0); !slices.Equal(got, []string{"fresh"}) {
		t.Fatalf("orphans after the removal, of any age: %v, want [fresh]", got)
	}
}

// needLoopQuota fails the test under CI=true, and skips it elsewhere, when
// loop quotas cannot be made here (root, mkfs.ext4 and e2fsck).
func needLoopQuota(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 || exec.Command("mkfs.ext4", "-V").Run() != nil || exec.Command("e2fsck", "-V").Run() != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("loop quota needs root, mkfs.ext4 and e2fsck")
		}
		t.Skip("loop quota needs root, mkfs.ext4 and e2fsck")
	}
}

// FuzzSafeNameIsSafePattern holds the hand-written check of SafeID to the
// regular expression it stands for, and Dirs to filepath.Join.
func FuzzSafeNameIsSafePattern(f *testing.F) {
	for _, s := range []string{"ctr_01", "a", "", "-a", ".", "a..b", "a/b", "A.b-c_d", strings.Repeat("x", 100), strings.Repeat("x", 101), "a\n", "é", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := safeName(id), safePattern.MatchString(id); got != want {
			t.Fatalf("safeName(%q) = %v, the pattern says %v", id, got, want)
		}
		l := &Layout{containers: "/srv/threadbox/containers"}
		d := l.Dirs(id)
		root := filepath.Join(l.containers, SafeID(id))
		want := Dirs{Root: root, Workspace: filepath.Join(root, "workspace"), Uploads: filepath.Join(root, "uploads"),
			Outputs: filepath.Join(root, "outputs"), Skills: filepath.Join(root, "skills")}
		if d != want {
			t.Fatalf("Dirs(%q) = %+v, want %+v", id, d, want)
		}
	})
}
