package cgroupacct

import (
	"encoding/binary"
	"fmt"
	"os"
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
	waitFor(t, "the kill to be noted", killed.Killed)
	for i, w := range watches {
		if i != 150 && w.Killed() {
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
			out = append(out, ws.watches[wd].Killed())
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
	if ended.Killed() {
		t.Fatal("an ended sandbox's closed watch says it ran out of memory")
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
	if !w.Killed() {
		t.Fatal("a kill counted before the watch closed is not seen")
	}

	gone := &OOMWatch{oom: OOM{Path: filepath.Join(t.TempDir(), "memory.events")}}
	gone.Close()
	if gone.Killed() {
		t.Fatal("a group whose file is gone counts as killed")
	}
}
