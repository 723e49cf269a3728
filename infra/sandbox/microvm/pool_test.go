package microvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/sandbox/slot"
)

// claimedCases are the suite's cases run on VMs claimed from the warm
// pool: a few, since each boots a VM under emulation here.
var claimedCases = []string{"BashSemantics", "OutputDir", "Isolation"}

// TestConformanceClaimed runs conformance cases on VMs claimed from the
// warm pool (all of them with MICROVM_CONFORMANCE=full).
func TestConformanceClaimed(t *testing.T) {
	newBackend := func(t *testing.T) sandbox.Backend { return sandboxtest.Claiming(newTestBackend(t, Config{})) }
	caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: true, CPU: true}
	if testAccel() == AccelTCG {
		caps.CommandTimeout = 3 * time.Minute
	}
	cases := claimedCases
	if os.Getenv("MICROVM_CONFORMANCE") == "full" {
		cases = sandboxtest.Cases()
	}
	sandboxtest.RunCases(t, newBackend, caps, cases...)
}

// TestClaimedFolders: a warm VM is listed until claimed; once claimed it
// sees the files the host wrote in the container's folders before the
// claim, the sandbox user's writes land in them (outputs the first thing
// it touches), the read-only folders refuse writes,
// and nothing of the empty slot it booted over shows. Its stop removes
// the slot and leaves the container's files.
func TestClaimedFolders(t *testing.T) {
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	id, name := fmt.Sprintf("claimed-%d", time.Now().UnixNano()), "warm-folders-1"
	slotDir := b.pool.Slot(name).Dir
	d := sandboxtest.WarmClaimed(t, b, dirs, name, id)
	run := func(script string) string {
		t.Helper()
		r, err := b.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: 2 * time.Minute})
		if err != nil {
			t.Fatalf("%q: %v", script, err)
		}
		return strings.TrimSpace(string(r.Stdout) + string(r.Stderr))
	}
	targets := map[string]string{}
	for _, m := range d.Mounts() {
		targets[m.Source] = m.Target
	}
	for _, c := range []struct{ script, want string }{
		// First, before anything stats the folder: the sandbox user's
		// write into outputs is checked against what the guest saw at
		// its mount, the slot's folder.
		{"echo made > " + targets[d.Outputs] + "/o.txt && echo ok", "ok"},
		{"cat " + targets[d.Workspace] + "/w.txt " + targets[d.Uploads] + "/u.txt " + targets[d.Skills] + "/s.txt", "from hostfrom hostfrom host"},
		{"echo from guest > " + targets[d.Workspace] + "/g.txt && echo ok", "ok"},
		{"touch " + targets[d.Uploads] + "/x 2>/dev/null && echo writable || echo ro", "ro"},
		{"touch " + targets[d.Skills] + "/x 2>/dev/null && echo writable || echo ro", "ro"},
		{"ls -A " + targets[d.Outputs], "o.txt"},
	} {
		if got := run(c.script); got != c.want {
			t.Errorf("%s: %q, want %q", c.script, got, c.want)
		}
	}
	if got, err := os.ReadFile(filepath.Join(d.Workspace, "g.txt")); err != nil || string(got) != "from guest\n" {
		t.Errorf("the guest's file on the host: %q %v", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(d.Outputs, "o.txt")); err != nil || string(got) != "made\n" {
		t.Errorf("the guest's output on the host: %q %v", got, err)
	}
	// A claimed VM's shares are 9p: its checkpoint fails, saying so, and
	// it serves on.
	if err := b.Checkpoint(ctx, id, t.TempDir()); err == nil || !strings.Contains(err.Error(), "9p") {
		t.Errorf("checkpoint of a claimed VM: %v, want a failure naming its 9p shares", err)
	}
	if got := run("cat " + targets[d.Workspace] + "/g.txt"); got != "from guest" {
		t.Errorf("after the refused checkpoint: %q", got)
	}
	if err := b.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(slotDir); !os.IsNotExist(err) {
		t.Errorf("the slot is left after the stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Workspace, "w.txt")); err != nil {
		t.Errorf("the container's file went with the slot: %v", err)
	}
}

// TestSlotRemovalKeepsBoundFolders: removing a slot with a container's
// folder still bound under it unmounts the folder before it deletes
// anything, so the container's files stay.
func TestSlotRemovalKeepsBoundFolders(t *testing.T) {
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "binding a folder needs root")
	}
	dir := filepath.Join(t.TempDir(), "slot")
	mounts := sandbox.FolderTargets()
	if err := (shareLayout{}).Make(dir, mounts); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "keep.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	place := (shareLayout{}).Place(dir, 0, mounts[0])
	if place != filepath.Join(dir, "0", shareSub) {
		t.Fatalf("place %s", place)
	}
	if err := slot.BindAt(place, src, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(place, "keep.txt")); err != nil {
		t.Fatalf("the bound folder does not show at its place: %v", err)
	}
	if err := (shareLayout{}).Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("slot left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(src, "keep.txt")); err != nil {
		t.Errorf("the bound folder's file went with the slot: %v", err)
	}
}

// TestClaimedIsolation: a claimed VM sees only its claimant's folders,
// none of another container's files or of a previous claimant's
// processes, environment or /tmp, and is never claimed twice. The suite's
// check searches the whole root filesystem, which takes longer than its
// 20 s bound over 9p on an emulated CPU under load, so it runs with the
// whole suite (MICROVM_CONFORMANCE=full); by default TestWarmFromTemplate
// checks a copy's own /tmp, processes and environment, and the claimed
// Isolation case another container's files.
func TestClaimedIsolation(t *testing.T) {
	if os.Getenv("MICROVM_CONFORMANCE") != "full" {
		t.Skip("runs with `make test-microvm` (MICROVM_CONFORMANCE=full): it searches the whole root filesystem, slow under emulation")
	}
	sandboxtest.ClaimedIsolation(t, newTestBackend(t, Config{}))
}

// TestWarmFromTemplate: warm VMs are restored from one template: each
// claimed copy runs with the host's clock, its root filesystem the
// image the template held mounted, its own random generator
// state, its own /tmp and processes
// (the copies share the template's memory only until they write it),
// and the template's files are gone with the backend. A configuration
// whose template cannot be made boots its warm VMs instead.
// TestTemplateKeyBeforeAvailable checks that a template's key is the same
// whether or not the backend had chosen its accelerator before: the first
// warm VM of a process that has not booted a VM yet asks for the key
// before the boot chooses it, and a key without it would have the next
// warm VM make the template again.
func TestTemplateKeyBeforeAvailable(t *testing.T) {
	rootfs, guest, bin := prerequisites(t)
	b, err := New(Config{RootFS: rootfs, Guest: guest, AgentBin: bin, Accel: testAccel(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	spec := sandbox.Spec{ID: "warm-key", Mounts: sandbox.FolderTargets()}
	first, err := b.templateKey(ctx, spec)
	if err != nil {
		sandboxtest.Need(t, "microvm backend not available: %v", err)
	}
	if err := b.Available(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := b.templateKey(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if first != again {
		t.Errorf("the template key changed once the accelerator was chosen: %s, then %s", first, again)
	}
}

func TestWarmFromTemplate(t *testing.T) {
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	env := []string{"POOL_ENV=same"}
	var ids []string
	for i := range 2 {
		name, id := fmt.Sprintf("warm-tmpl-%d", i), fmt.Sprintf("tmpl-%d-%d", i, time.Now().UnixNano())
		sandboxtest.Cleanup(t, func() { _ = b.Remove(ctx, id); _ = b.Remove(ctx, name); _ = dirs.Remove(ctx, id) })
		if err := b.Warm(ctx, sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets(), Env: env}); err != nil {
			t.Fatal(err)
		}
		if bx := b.boxes.Get(name); bx == nil || !bx.restored {
			t.Fatalf("warm VM %s was not restored from the template", name)
		}
		d, err := dirs.Prepare(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Claim(ctx, name, sandbox.Spec{ID: id, Mounts: d.Mounts(), Env: env}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	run := func(id, script string) string {
		t.Helper()
		r, err := b.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: 2 * time.Minute})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %q: %+v %v", id, script, r, err)
		}
		return strings.TrimSpace(string(r.Stdout))
	}
	for _, id := range ids {
		before := time.Now()
		got := run(id, "date +%s%N")
		var guest int64
		if _, err := fmt.Sscan(got, &guest); err != nil {
			t.Fatalf("date: %q", got)
		}
		if d := sandboxtest.ClockOff(before, time.Now(), guest); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("%s: the guest's clock is %v off the host's", id, d)
		}
		if got := run(id, "echo $POOL_ENV"); got != "same" {
			t.Errorf("%s: environment %q", id, got)
		}
		// The root is the image the template held mounted, read-only.
		if got := run(id, `awk '$2 == "/" {print $3, substr($4, 1, 2)}' /proc/mounts`); got != "erofs ro" {
			t.Errorf("%s: the root is mounted as %q, want the read-only erofs image", id, got)
		}
	}
	// Each copy's kernel was reseeded with the host's seed of its own:
	// copies of one generator state would give code the same bytes.
	if a, b := run(ids[0], "od -An -tx1 -N16 /dev/urandom"), run(ids[1], "od -An -tx1 -N16 /dev/urandom"); a == b {
		t.Errorf("both copies read %s from /dev/urandom", a)
	}
	run(ids[0], "echo first > /tmp/mine; (sleep 600 >/dev/null 2>&1 &)")
	if got := run(ids[1], "ls -A /tmp; pgrep -x sleep || echo none"); got != "none" {
		t.Errorf("the second copy sees the first's /tmp or processes: %q", got)
	}
	b.tmplMu.Lock()
	tdir := b.tmpl.dir
	b.tmplMu.Unlock()
	if _, err := os.Stat(filepath.Join(tdir, "state")); err != nil {
		t.Fatalf("no template state: %v", err)
	}

	// A configuration whose template cannot be made: its warm VMs boot.
	other := sandbox.Spec{ID: "warm-tmpl-failed", Mounts: sandbox.FolderTargets(), Env: []string{"POOL_ENV=other"}}
	sandboxtest.Cleanup(t, func() { _ = b.Remove(ctx, other.ID) })
	key, err := b.templateKey(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	b.tmplMu.Lock()
	b.tmplFailed[key] = fmt.Errorf("made to fail by the test")
	b.tmplMu.Unlock()
	if err := b.Warm(ctx, other); err != nil {
		t.Fatal(err)
	}
	if bx := b.boxes.Get(other.ID); bx == nil || bx.restored {
		t.Fatal("the warm VM of a configuration without a template was not booted")
	}
}

// TestReconcileRemovesLeftTemplates: the template, initramfs files and
// warm slots a process that ended left are removed; this backend's own
// template and slots are kept.
func TestReconcileRemovesLeftTemplates(t *testing.T) {
	dir := t.TempDir()
	b, err := New(Config{StateDir: dir, Guest: dir, RootFS: dir, AgentBin: filepath.Join(dir, "agent")})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * DefaultBootTimeout)
	mk := func(rel string) string {
		p := filepath.Join(b.dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		for q := p; q != b.dir; q = filepath.Dir(q) {
			if err := os.Chtimes(q, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	left := mk("template-left/ram")
	mine := mk("template-mine/ram")
	initrd := mk("vm-1.initrd")
	young := filepath.Join(b.dir, "template-young")
	if err := os.Mkdir(young, 0o700); err != nil {
		t.Fatal(err)
	}
	b.tmpl = &template{dir: filepath.Dir(mine)}
	// The slot folders of an ended process and of this one.
	deadSlot := filepath.Join(filepath.Dir(b.slots), "999999999", "warm-1", "0", shareSub)
	mySlot := filepath.Join(b.slots, "warm-2", "0", shareSub)
	for _, d := range []string{deadSlot, mySlot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.Reconcile(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{filepath.Dir(left): false, initrd: false, mine: true, young: true,
		filepath.Join(filepath.Dir(b.slots), "999999999"): false, mySlot: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", p, err == nil, want)
		}
	}
}

// TestGuestClockUnderLoad: a warm VM whose template booted while every
// host CPU was busy keeps time by a clock that a starved emulated CPU
// cannot lose: its clock source is not the timer tick, and its clock keeps
// pace with the host's while the host stays busy. (An emulated guest left
// to check its TSC against the tick calls it unstable under such load,
// and then falls a second behind every few.)
func TestGuestClockUnderLoad(t *testing.T) {
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	busy(t, 3*runtime.NumCPU())
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	name, id := "warm-busy", fmt.Sprintf("busy-%d", time.Now().UnixNano())
	sandboxtest.Cleanup(t, func() { _ = b.Remove(ctx, id); _ = b.Remove(ctx, name); _ = dirs.Remove(ctx, id) })
	if err := b.Warm(ctx, sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets()}); err != nil {
		t.Fatal(err)
	}
	d, err := dirs.Prepare(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Claim(ctx, name, sandbox.Spec{ID: id, Mounts: d.Mounts()}); err != nil {
		t.Fatal(err)
	}
	// offset returns how far the guest's clock is behind the host's
	// (sandboxtest.ClockOff), and the guest's clock source.
	offset := func() (time.Duration, string) {
		t.Helper()
		before := time.Now()
		r, err := b.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c",
			"date +%s%N; cat /sys/devices/system/clocksource/clocksource0/current_clocksource"}, Timeout: 2 * time.Minute})
		after := time.Now()
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%+v %v", r, err)
		}
		var guest int64
		var source string
		if _, err := fmt.Sscan(string(r.Stdout), &guest, &source); err != nil {
			t.Fatalf("%q: %v", r.Stdout, err)
		}
		return sandboxtest.ClockOff(before, after, guest), source
	}
	first, source := offset()
	if strings.Contains(source, "jiffies") {
		t.Errorf("the guest keeps time by the timer tick (%s)", source)
	}
	time.Sleep(6 * time.Second)
	last, source := offset()
	if strings.Contains(source, "jiffies") {
		t.Errorf("the guest keeps time by the timer tick (%s)", source)
	}
	if first < -time.Second || first > time.Second || last < -time.Second || last > time.Second {
		t.Errorf("the guest's clock is %v behind the host's, then %v six seconds later", first, last)
	}
}

// busy keeps n processes spinning on the host's CPUs until t ends.
func busy(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		// Gone with the test binary, even one killed before its cleanup.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sandboxtest.Cleanup(t, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}
