package maketest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// guestBuild is a copy of the microVM guest's build script with stand-ins
// for apt-get and apt-cache: they answer from a fixed package index, and
// an update fails (offline) when FAKE_UPDATE_RC says so.
type guestBuild struct {
	dir, roots string
	env        []string
}

func newGuestBuild(t *testing.T) *guestBuild {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, dir, "sandbox/microvm-guest.sh")
	copyFile(t, dir, "scripts/debian-trixie.sh")
	bin := filepath.Join(dir, "fakebin")
	write(t, bin, map[string]string{
		"apt-cache": `#!/bin/sh
case "$1" in
policy) echo "  Candidate: 1.0-1" ;;
depends) echo "  Depends: linux-image-6.1.0-99-amd64" ;;
esac
`,
		"apt-get": `#!/bin/sh
case " $* " in
*" update "*) exit "${FAKE_UPDATE_RC:-0}" ;;
*" --print-uris "*)
  echo "'file:/nowhere/qemu-system-x86.deb' qemu-system-x86_10.0_amd64.deb 1 SHA256:00"
  echo "'file:/nowhere/qemu-system-data.deb' qemu-system-data_10.0_all.deb 1 SHA256:00" ;;
*) echo "apt-get $*: not served by this stand-in" >&2; exit 1 ;;
esac
`,
	})
	for _, f := range []string{"apt-get", "apt-cache"} {
		if err := os.Chmod(filepath.Join(bin, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "cache")
	return &guestBuild{
		dir:   dir,
		roots: filepath.Join(cache, "microvm-guest"),
		env: append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"),
			"THREADBOX_CACHE_DIR="+cache, "DEBIAN_MIRROR=file:/nowhere/debian", "TMPDIR="+t.TempDir()),
	}
}

// run runs the script with extra environment, returning its stderr and
// whether it succeeded.
func (g *guestBuild) run(t *testing.T, extra ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(g.dir, "sandbox", "microvm-guest.sh"))
	cmd.Env = append(append([]string{}, g.env...), extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// built makes a finished build named name under the roots.
func (g *guestBuild) built(t *testing.T, name string) {
	t.Helper()
	write(t, filepath.Join(g.roots, name), map[string]string{".threadbox-complete": name + "\n"})
}

func (g *guestBuild) current(t *testing.T) string {
	t.Helper()
	l, err := os.Readlink(filepath.Join(g.roots, "current"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMicroVMGuestOffline: without a package index to read, a guest
// already built is kept as it is, and with none the build fails saying
// why.
func TestMicroVMGuestOffline(t *testing.T) {
	g := newGuestBuild(t)
	out, ok := g.run(t, "FAKE_UPDATE_RC=100")
	if ok || !strings.Contains(out, "cannot read Debian trixie's package index") {
		t.Fatalf("offline with nothing built: ok=%v\n%s\nwant a failure naming the index", ok, out)
	}
	g.built(t, "b1")
	if err := os.Symlink("b1", filepath.Join(g.roots, "current")); err != nil {
		t.Fatal(err)
	}
	out, ok = g.run(t, "FAKE_UPDATE_RC=100")
	if !ok || !strings.Contains(out, "keeping the guest built before") {
		t.Fatalf("offline with a guest built: ok=%v\n%s\nwant it kept", ok, out)
	}
	if c := g.current(t); c != "b1" {
		t.Errorf("current = %q, want b1", c)
	}
}

// TestMicroVMGuestPrune: making another build current keeps the one
// current before it and removes older finished ones and stale partial
// ones; a folder it did not finish and a fresh partial one stay.
func TestMicroVMGuestPrune(t *testing.T) {
	g := newGuestBuild(t)
	// The first run names its folder, then cannot download (the stand-in
	// serves no packages).
	out, ok := g.run(t)
	m := regexp.MustCompile(`-> \S+/microvm-guest/([0-9a-f]{64})`).FindStringSubmatch(out)
	if ok || m == nil {
		t.Fatalf("first run: ok=%v\n%s\nwant it to name its folder and fail to download", ok, out)
	}
	hash := m[1]
	for _, b := range []string{hash, "before", "older"} {
		g.built(t, b)
	}
	write(t, filepath.Join(g.roots, "unfinished"), map[string]string{"vmlinux": ""})
	write(t, filepath.Join(g.roots, "stale.tmp"), map[string]string{"vmlinux": ""})
	write(t, filepath.Join(g.roots, "fresh.tmp"), map[string]string{"vmlinux": ""})
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(g.roots, "stale.tmp"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("before", filepath.Join(g.roots, "current")); err != nil {
		t.Fatal(err)
	}
	out, ok = g.run(t)
	if !ok || !strings.Contains(out, "already built") {
		t.Fatalf("second run: ok=%v\n%s\nwant the folder found built", ok, out)
	}
	if c := g.current(t); c != hash {
		t.Errorf("current = %q, want %s", c, hash)
	}
	for name, want := range map[string]bool{hash: true, "before": true, "older": false, "unfinished": true, "stale.tmp": false, "fresh.tmp": true} {
		_, err := os.Stat(filepath.Join(g.roots, name))
		if got := err == nil; got != want {
			t.Errorf("%s kept = %v, want %v", name, got, want)
		}
	}
	// Run again with nothing new: nothing more goes.
	if out, ok = g.run(t); !ok {
		t.Fatalf("third run: %s", out)
	}
	if _, err := os.Stat(filepath.Join(g.roots, "before")); err != nil {
		t.Errorf("a run that built nothing removed the previous build: %v", err)
	}
}
