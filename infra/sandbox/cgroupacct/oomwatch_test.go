package cgroupacct

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inotify counts this process's inotify instances and the watches they
// hold (from their fdinfo).
func inotify(t *testing.T) (instances, watches int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || l != "anon_inode:inotify" {
			continue
		}
		instances++
		if info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name())); err == nil {
			watches += strings.Count(string(info), "inotify wd:")
		}
	}
	return instances, watches
}

// inotifyInstances counts this process's inotify instances.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	n, _ := inotify(t)
	return n
}

// inotifyWatches counts the inotify watches this process holds.
func inotifyWatches(t *testing.T) int {
	t.Helper()
	_, n := inotify(t)
	return n
}

// TestOOMWatcherSharesOneInstance: the cgroup v2 watches of one watcher
// share one inotify instance, so more sandboxes than the kernel's default
// 128 instances per user are watched; a change of one group's kill count
// marks that group only, a group removed is forgotten, and Close ends the
// instance.
func TestOOMWatcherSharesOneInstance(t *testing.T) {
	const groups = 200
	dir := t.TempDir()
	before := inotifyInstances(t)
	var ws OOMWatcher
	watches := make([]*OOMWatch, groups)
	for i := range watches {
		p := filepath.Join(dir, fmt.Sprintf("g%d", i), "memory.events")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := ws.Watch(OOM{Path: p})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		watches[i] = w
	}
	if n := inotifyInstances(t) - before; n != 1 {
		t.Fatalf("%d inotify instances for %d watches, want 1", n, groups)
	}

	killed := watches[150]
	if err := os.WriteFile(killed.oom.Path, []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the kill to be noted", func() bool { return ranOut(killed) })
	for i, w := range watches {
		if i != 150 && ranOut(w) {
			t.Fatalf("group %d marked killed by another group's kill", i)
		}
	}

	// A group removed (its runtime removed the cgroup) is forgotten.
	gone := watches[7]
	if err := os.RemoveAll(filepath.Dir(gone.oom.Path)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed group to be forgotten", func() bool {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		return ws.watches[gone.wd] == nil
	})
	gone.Close()
	watches[8].Close()
	ws.mu.Lock()
	left := len(ws.watches)
	ws.mu.Unlock()
	if left != groups-2 {
		t.Fatalf("%d watches left, want %d", left, groups-2)
	}

	ws.Close()
	if n := inotifyInstances(t) - before; n != 0 {
		t.Fatalf("%d inotify instances after Close, want none", n)
	}
	if _, err := ws.Watch(OOM{Path: watches[0].oom.Path}); err == nil {
		t.Fatal("a closed watcher made a watch")
	}
	for _, w := range watches {
		w.Close() // after the watcher's Close: nothing to do
	}
}

// TestOOMWatcherDispatch: an event names the one watch whose counts are
// looked at; a queue overflow, after which events were lost, looks at
// every watch's; IN_IGNORED forgets the watch.
func TestOOMWatcherDispatch(t *testing.T) {
	dir := t.TempDir()
	ws := OOMWatcher{watches: map[int32]*OOMWatch{}}
	for wd := int32(1); wd <= 3; wd++ {
		p := filepath.Join(dir, fmt.Sprint(wd))
		if err := os.WriteFile(p, []byte("oom 0\noom_kill 0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ws.watches[wd] = &OOMWatch{oom: OOM{Path: p}, wd: wd}
	}
	for wd := int32(1); wd <= 3; wd++ {
		// Every group was killed; only the events tell the watches.
		if err := os.WriteFile(ws.watches[wd].oom.Path, []byte("oom 1\noom_kill 1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	event := func(wd int32, mask uint32) []byte {
		b := make([]byte, unix.SizeofInotifyEvent)
		binary.NativeEndian.PutUint32(b, uint32(wd))
		binary.NativeEndian.PutUint32(b[4:], mask)
		return b
	}
	killed := func() (out []bool) {
		for wd := int32(1); wd <= 3; wd++ {
			out = append(out, ranOut(ws.watches[wd]))
		}
		return out
	}
	ws.dispatch(event(2, unix.IN_MODIFY))
	if got := fmt.Sprint(killed()); got != "[false true false]" {
		t.Fatalf("after a change of group 2: killed %s, want [false true false]", got)
	}
	ws.dispatch(event(-1, unix.IN_Q_OVERFLOW))
	if got := fmt.Sprint(killed()); got != "[true true true]" {
		t.Fatalf("after a queue overflow: killed %s, want every group", got)
	}
	ws.dispatch(append(event(3, unix.IN_IGNORED), event(1, unix.IN_MODIFY)...))
	if _, ok := ws.watches[3]; ok || len(ws.watches) != 2 {
		t.Fatalf("watches after IN_IGNORED of 3: %v", ws.watches)
	}
}

// ranOut reports whether w counted the group running out of memory since
// it began.
func ranOut(w *OOMWatch) bool { return w.Kills() > w.base[1] }

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOOMSlotFollowsTheSandbox: the watch of a sandbox's memory kills is
// made once its control group is known, while the watcher of its end
// already runs. A watch kept while the sandbox runs is closed when it
// ends, one made after it ended is closed at once, and the two sides may
// meet.
func TestOOMSlotFollowsTheSandbox(t *testing.T) {
	events := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(events, []byte("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ws OOMWatcher
	defer ws.Close()
	watch := func() *OOMWatch {
		t.Helper()
		w, err := ws.Watch(OOM{Path: events})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	before := inotifyWatches(t)

	running := &OOMSlot{}
	running.Set(watch())
	if n := inotifyWatches(t) - before; n != 1 {
		t.Fatalf("%d watches for a running sandbox, want 1", n)
	}
	running.End()
	if n := inotifyWatches(t) - before; n != 0 {
		t.Fatalf("%d watches left after the sandbox ended, want 0", n)
	}

	ended := &OOMSlot{}
	ended.End()
	ended.Set(watch())
	if n := inotifyWatches(t) - before; n != 0 {
		t.Fatalf("the watch made after the sandbox ended is kept (%d watches)", n)
	}
	if _, ok := ended.Kills(OOM{}); ok {
		t.Fatal("an ended sandbox keeps the watch made after its end")
	}

	for range 50 {
		bx := &OOMSlot{}
		w := watch()
		var wg sync.WaitGroup
		wg.Go(func() { bx.Set(w) })
		wg.Go(func() { bx.End() })
		wg.Wait()
	}
	if n := inotifyWatches(t) - before; n != 0 {
		t.Fatalf("%d watches left after sandboxes whose end met their watch's start", n)
	}
}

// TestOOMWatchLastLook: closing a v2 watch looks at the group's counts
// once more, so a kill whose event the watcher had not read yet (the
// sandbox ended at once) still counts.
func TestOOMWatchLastLook(t *testing.T) {
	p := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(p, []byte("oom 0\noom_kill 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &OOMWatch{oom: OOM{Path: p}}
	if err := os.WriteFile(p, []byte("oom 1\noom_kill 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !ranOut(w) {
		t.Fatal("a kill counted before the watch closed is not seen")
	}

	gone := &OOMWatch{oom: OOM{Path: filepath.Join(t.TempDir(), "memory.events")}}
	gone.Close()
	if ranOut(gone) {
		t.Fatal("a group whose file is gone counts as killed")
	}
}

// TestOOMSlotKillsOutliveTheGroup: a sandbox's kill count reads its
// group's counter while the group is there, and once the runtime removed
// the group with the sandbox, the count its watch reached, so a count
// taken before a command and one taken after the sandbox died under it
// differ when it died of memory, and only then.
func TestOOMSlotKillsOutliveTheGroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kill  bool
		count int64
	}{
		{name: "died of memory", kill: true, count: 3},
		{name: "died otherwise", count: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "g", "memory.events")
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("oom 2\noom_kill 2\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			var ws OOMWatcher
			defer ws.Close()
			w, err := ws.Watch(OOM{Path: p})
			if err != nil {
				t.Fatal(err)
			}
			var slot OOMSlot
			slot.Set(w)
			live := OOM{Path: p}
			before, ok := slot.Kills(live)
			if !ok || before != 2 {
				t.Fatalf("kills before the command %d, %v; want 2, true", before, ok)
			}
			if tc.kill {
				if err := os.WriteFile(p, []byte("oom 3\noom_kill 3\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the kill to be counted", func() bool { return w.Kills() == 3 })
			}
			// The sandbox died; its runtime removed the group.
			if err := os.RemoveAll(filepath.Dir(p)); err != nil {
				t.Fatal(err)
			}
			slot.End()
			if n, ok := slot.Kills(live); !ok || n != tc.count {
				t.Fatalf("kills after the group went %d, %v; want %d, true", n, ok, tc.count)
			}
		})
	}
	var empty OOMSlot
	if _, ok := empty.Kills(OOM{}); ok {
		t.Fatal("a sandbox with neither a counter nor a watch counts kills")
	}
}

// TestOOMWatchCgroupV1: on a host whose memory controller is on cgroup
// v1, a real group's memory kill raises its watch's count through the
// eventfd notification, and the count stays after the group is removed.
func TestOOMWatchCgroupV1(t *testing.T) {
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "cgroup.event_control")); err != nil {
		t.Skip("no cgroup v1 memory controller here")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("making a memory cgroup needs root, which CI runs as")
		}
		t.Skip("making a memory cgroup needs root")
	}
	dir, err := os.MkdirTemp(root, "threadbox-oomwatch-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("16777216"), 0); err != nil && f == "memory.limit_in_bytes" {
			t.Fatal(err)
		}
	}
	var ws OOMWatcher
	defer ws.Close()
	live := OOM{Path: filepath.Join(dir, "memory.oom_control")}
	w, err := ws.Watch(live)
	if err != nil {
		t.Fatal(err)
	}
	var slot OOMSlot
	slot.Set(w)
	before, ok := slot.Kills(live)
	if !ok {
		t.Fatal("the group's counter does not read")
	}
	// The shell moves itself into the group, then holds 64 MiB of
	// /dev/zero (tail keeps the last 64 MiB of an endless pipe).
	hog := exec.Command("sh", "-c", "echo $$ > "+filepath.Join(dir, "cgroup.procs")+" && cat /dev/zero | tail -c 67108864")
	if err := hog.Run(); err == nil {
		t.Fatal("the hog ended without being killed")
	}
	waitFor(t, "the kill to be counted", func() bool { return w.Kills() > before })
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	slot.End()
	if n, ok := slot.Kills(live); !ok || n <= before {
		t.Fatalf("kills after the group went %d, %v; want more than %d", n, ok, before)
	}
}
