package gvisor

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"threadbox/infra/sandbox/cgroupacct"
)

// inotifyWatches counts the inotify watches this process holds, from the
// fdinfo of its inotify instances.
func inotifyWatches(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || l != "anon_inode:inotify" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		n += strings.Count(string(info), "inotify wd:")
	}
	return n
}

// TestOOMWatchFollowsTheSandbox: the watch of a sandbox's memory kills is
// made once its agent answered, while the watcher of its end already
// runs. A watch kept while the sandbox runs is closed when it ends, one
// made after it ended is closed at once, and the two sides may meet.
func TestOOMWatchFollowsTheSandbox(t *testing.T) {
	events := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(events, []byte("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ws cgroupacct.OOMWatcher
	defer ws.Close()
	watch := func() *cgroupacct.OOMWatch {
		t.Helper()
		w, err := ws.Watch(cgroupacct.OOM{Path: events})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	before := inotifyWatches(t)

	running := &box{}
	running.setOOM(watch())
	if n := inotifyWatches(t) - before; n != 1 {
		t.Fatalf("%d watches for a running sandbox, want 1", n)
	}
	running.endOOM()
	if n := inotifyWatches(t) - before; n != 0 {
		t.Fatalf("%d watches left after the sandbox ended, want 0", n)
	}

	ended := &box{}
	ended.endOOM()
	ended.setOOM(watch())
	if n := inotifyWatches(t) - before; n != 0 {
		t.Fatalf("the watch made after the sandbox ended is kept (%d watches)", n)
	}
	if ended.oomKilled() {
		t.Fatal("an ended sandbox's closed watch says it ran out of memory")
	}

	for range 50 {
		bx := &box{}
		w := watch()
		var wg sync.WaitGroup
		wg.Go(func() { bx.setOOM(w) })
		wg.Go(func() { bx.endOOM() })
		wg.Wait()
	}
	if n := inotifyWatches(t) - before; n != 0 {
		t.Fatalf("%d watches left after sandboxes whose end met their watch's start", n)
	}
}
