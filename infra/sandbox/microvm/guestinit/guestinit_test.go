package guestinit

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseShares(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Share
		err  bool
	}{
		{in: "", want: nil},
		{in: "m0:/home/agent/workspace:rw:. m1:/mnt/user-data/uploads:ro:d",
			want: []Share{{"m0", "/home/agent/workspace", false, ""}, {"m1", "/mnt/user-data/uploads", true, "d"}}},
		{in: "m0:/w:rw", err: true},
		{in: "m0:/w:rx:.", err: true},
		{in: "m0:relative:rw:.", err: true},
		{in: "m0:/w:rw:..", err: true},
		{in: "m0:/w:rw:a/b", err: true},
		{in: ":/w:rw:.", err: true},
	} {
		got, err := ParseShares(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%q: error %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if !tc.err && len(got) != len(tc.want) {
			t.Errorf("%q: %+v, want %+v", tc.in, got, tc.want)
			continue
		}
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("%q: share %d is %+v, want %+v", tc.in, i, got[i], tc.want[i])
			}
			if back, err := ParseShares(got[i].String()); err != nil || back[0] != got[i] {
				t.Errorf("%+v does not read back: %+v %v", got[i], back, err)
			}
		}
	}
}

func TestGoWord(t *testing.T) {
	seed := bytes.Repeat([]byte{0xab}, SeedBytes)
	ns, got, err := ParseGo(strings.TrimSuffix(Go(1765000000123456789, seed), "\n"))
	if err != nil || ns != 1765000000123456789 || !bytes.Equal(got, seed) {
		t.Fatalf("round trip: %d %x %v", ns, got, err)
	}
	for _, bad := range []string{"", "go", "go 12", "halt 12 " + strings.Repeat("00", SeedBytes), "go x " + strings.Repeat("00", SeedBytes),
		"go 0 " + strings.Repeat("00", SeedBytes), "go 12 abcd", "go 12 " + strings.Repeat("zz", SeedBytes)} {
		if _, _, err := ParseGo(bad); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

// TestPlan: the root filesystem first, read-only; /tmp and the agent's
// folder moved in before the shares; /dev moved last, then the
// initramfs's /sys and /proc let go; over 9p or virtiofs.
func TestPlan(t *testing.T) {
	const o = "trans=virtio,version=9p2000.L,msize=262144"
	for _, tc := range []struct {
		fs, from string
		root, m0 string
	}{
		{FS9p, RootShared, "mount -t 9p -o ro," + o + ",cache=loose root /newroot", "mount -t 9p -o nosuid,nodev," + o + ",cache=none m0 /newroot/home/agent/workspace"},
		{FSVirtiofs, RootShared, "mount -t virtiofs -o ro root /newroot", "mount -t virtiofs -o nosuid,nodev m0 /newroot/home/agent/workspace"},
		{FS9p, RootImage, "mount -t erofs -o ro /dev/vda /newroot", "mount -t 9p -o nosuid,nodev," + o + ",cache=none m0 /newroot/home/agent/workspace"},
	} {
		t.Run(tc.fs+"-"+tc.from, func(t *testing.T) {
			var got []string
			for _, op := range Plan([]Share{{Tag: "m0", Target: "/home/agent/workspace"}}, tc.fs, tc.from) {
				got = append(got, op.String())
			}
			want := []string{
				tc.root,
				"mount -t proc -o nosuid,nodev,noexec proc /newroot/proc",
				"mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /newroot/sys",
				"mount --move /tmp /newroot/tmp",
				"mount --move /opt/threadbox /newroot/opt/threadbox",
				tc.m0,
				"mount --move /dev /newroot/dev",
				"umount /sys",
				"umount /proc",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
	if CheckFS("nfs") == nil || CheckFS(FS9p) != nil || CheckFS(FSVirtiofs) != nil {
		t.Error("CheckFS takes 9p and virtiofs only")
	}
	if CheckRoot("") == nil || CheckRoot(RootShared) != nil || CheckRoot(RootImage) != nil {
		t.Error("CheckRoot takes shared and image only")
	}
}

// TestReadLine: the host's word is read up to its newline and nothing
// after it, which is the agent protocol's.
func TestReadLine(t *testing.T) {
	r := strings.NewReader("go 1 ab\nPROTOCOL")
	line, err := readLine(r)
	if err != nil || line != "go 1 ab" {
		t.Fatalf("%q %v", line, err)
	}
	if rest := r.Len(); rest != len("PROTOCOL") {
		t.Errorf("%d bytes left, want the protocol's %d", rest, len("PROTOCOL"))
	}
	if _, err := readLine(strings.NewReader(strings.Repeat("x", 5000))); err == nil {
		t.Error("an endless line was taken")
	}
}

// heldWriter records whether the initramfs's files were gone when the
// init wrote HeldLine.
type heldWriter struct {
	removed    *bool
	goneAtHeld bool
	wroteHeld  bool
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if string(p) == HeldLine {
		w.wroteHeld, w.goneAtHeld = true, *w.removed
	}
	return len(p), nil
}

// A template's init removes the initramfs's files before it holds, so
// that the saved template holds no files to remove and no copy restored
// from it removes them again.
func TestRunRemovesInitramfsBeforeHold(t *testing.T) {
	removed := false
	remove := func(keep string) error {
		if keep != NewRoot {
			t.Errorf("removal keeps %q, want %q", keep, NewRoot)
		}
		removed = true
		return nil
	}
	out := &heldWriter{removed: &removed}
	// The host's word never comes: Run ends at the hold.
	noMount := func(o Op) error {
		t.Errorf("%s before the hold, with a shared root", o)
		return nil
	}
	if err := run(strings.NewReader(""), out, io.Discard, Init{FS: FS9p, Root: RootShared, Hold: true}, remove, noMount); err == nil {
		t.Fatal("Run went on without the host's word")
	}
	if !out.wroteHeld {
		t.Fatal("no held line written")
	}
	if !out.goneAtHeld {
		t.Error("the initramfs's files were still there when the template held")
	}
}

// A template whose root is an image mounts it, with /proc, /sys, /tmp and
// the agent's folder, and warms it, all before it holds, so that copies
// restored from it start with the root mounted and its shell read; the
// shares, which QEMU cannot save mounted, wait for the host's word.
func TestRunMountsAnImageRootBeforeHold(t *testing.T) {
	var events []string
	remove := func(string) error { return nil }
	step := func(o Op) error {
		events = append(events, o.String())
		return nil
	}
	warm := func(root string) error {
		events = append(events, "warm "+root)
		return nil
	}
	out := writerFunc(func(p []byte) {
		if string(p) == HeldLine {
			events = append(events, "held")
		}
	})
	c := Init{Shares: []Share{{Tag: "m0", Target: "/home/agent/workspace", Sub: "d"}}, FS: FS9p, Root: RootImage, Hold: true, Warm: warm}
	// The host's word never comes: Run ends at the hold.
	if err := run(strings.NewReader(""), out, io.Discard, c, remove, step); err == nil {
		t.Fatal("Run went on without the host's word")
	}
	var want []string
	for _, o := range rootPlan(FS9p, RootImage) {
		want = append(want, o.String())
	}
	want = append(want, "warm "+NewRoot, "held")
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Errorf("before the host's word the init did\n%s\nwant\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}

	// A warm VM booted, not saved, does not warm its root: nothing is
	// kept of it.
	events = nil
	c.Hold = false
	stopAtShares := func(o Op) error {
		if strings.HasPrefix(o.Target, sharesAt) {
			return errors.New("stopped at the shares")
		}
		return step(o)
	}
	if err := run(strings.NewReader(""), out, io.Discard, c, remove, stopAtShares); err == nil {
		t.Fatal("the init went past the shares")
	}
	if len(events) != len(rootPlan(FS9p, RootImage)) {
		t.Errorf("a booted warm VM did %q before its shares", events)
	}
	for _, e := range events {
		if strings.HasPrefix(e, "warm ") {
			t.Error("a booted warm VM warmed its root")
		}
	}
}

// writerFunc is an io.Writer that hands each write to a function.
type writerFunc func(p []byte)

func (w writerFunc) Write(p []byte) (int, error) {
	w(p)
	return len(p), nil
}
