package cgroupacct

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// OOMWatch notes, as they happen, the kills a memory cgroup makes for
// memory: for a sandbox that dies of it with its control group, whose
// counter can no longer be read once its runtime removed the group. Its
// count (Kills) goes on where the group's counter stopped.
// Cgroup v1 registers an eventfd for memory.oom_control notifications;
// cgroup v2 watches memory.events with inotify, through the OOMWatcher
// that made it.
type OOMWatch struct {
	oom   OOM
	v1    bool
	base  [2]int64 // the oom and oom_kill counts at the start (v1: oom_kill only)
	kills atomic.Int64
	f     *os.File // the eventfd (v1)
	extra *os.File // the oom_control file a v1 registration names
	by    *OOMWatcher
	wd    int32 // the inotify watch of memory.events (v2)
}

// OOMWatcher makes the OOM watches of one owner (a sandbox backend). The
// cgroup v2 ones share one inotify instance: the kernel allows 128
// instances per user by default (fs.inotify.max_user_instances), so one
// per sandbox would leave every sandbox after the 128th unwatched, while
// watches of one instance are counted by the thousand. The zero
// OOMWatcher is ready; Close ends it.
type OOMWatcher struct {
	mu      sync.Mutex
	f       *os.File            // the inotify instance, once a v2 watch made it
	watches map[int32]*OOMWatch // by inotify watch descriptor
	closed  bool
}

// Watch starts watching o. The zero OOM cannot be watched.
func (ws *OOMWatcher) Watch(o OOM) (*OOMWatch, error) {
	if _, ok := o.Read(); !ok {
		return nil, errors.New("cgroupacct: no oom_kill counter to watch")
	}
	w := &OOMWatch{oom: o, v1: filepath.Base(o.Path) == "memory.oom_control"}
	if w.v1 {
		w.base[1], _ = o.Read()
		w.kills.Store(w.base[1])
		if err := w.eventfd(); err != nil {
			return nil, err
		}
		go w.loop()
		return w, nil
	}
	w.base, _ = w.counts()
	w.kills.Store(w.base[1])
	if err := ws.add(w); err != nil {
		return nil, err
	}
	return w, nil
}

// add watches w's memory.events on the shared inotify instance, made at
// the first v2 watch.
func (ws *OOMWatcher) add(w *OOMWatch) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return errors.New("cgroupacct: the OOM watcher is closed")
	}
	if ws.f == nil {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			return fmt.Errorf("cgroupacct: inotify: %w", err)
		}
		ws.f = os.NewFile(uintptr(fd), "oom-inotify")
		ws.watches = map[int32]*OOMWatch{}
		go ws.loop(ws.f)
	}
	wd, err := unix.InotifyAddWatch(int(ws.f.Fd()), w.oom.Path, unix.IN_MODIFY)
	if err != nil {
		return fmt.Errorf("cgroupacct: watch %s: %w", w.oom.Path, err)
	}
	w.by, w.wd = ws, int32(wd)
	ws.watches[w.wd] = w
	return nil
}

// loop reads the shared instance's events until Close.
func (ws *OOMWatcher) loop(f *os.File) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		ws.dispatch(buf[:n])
	}
}

// dispatch looks at the counts of each watch an event of events names; a
// watch whose file went (its group was removed: IN_IGNORED) is forgotten.
// A queue overflow (events lost) looks at every watch's counts.
func (ws *OOMWatcher) dispatch(events []byte) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(events); {
		wd := int32(binary.NativeEndian.Uint32(events[off:]))
		mask := binary.NativeEndian.Uint32(events[off+4:])
		off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(events[off+12:]))
		var check []*OOMWatch
		ws.mu.Lock()
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			for _, w := range ws.watches {
				check = append(check, w)
			}
		case mask&unix.IN_IGNORED != 0:
			delete(ws.watches, wd)
		case mask&unix.IN_MODIFY != 0 && ws.watches[wd] != nil:
			check = append(check, ws.watches[wd])
		}
		ws.mu.Unlock()
		for _, w := range check {
			w.check()
		}
	}
}

// remove stops watching w.
func (ws *OOMWatcher) remove(w *OOMWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.watches[w.wd] != w {
		return
	}
	delete(ws.watches, w.wd)
	_, _ = unix.InotifyRmWatch(int(ws.f.Fd()), uint32(w.wd))
}

// Close ends the shared instance and every v2 watch on it.
func (ws *OOMWatcher) Close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	if ws.f != nil {
		ws.f.Close()
		ws.f, ws.watches = nil, nil
	}
}

// eventfd registers an eventfd for the v1 group's OOM notifications.
func (w *OOMWatch) eventfd() error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroupacct: eventfd: %w", err)
	}
	w.f = os.NewFile(uintptr(efd), "oom-eventfd")
	ctl, err := os.Open(w.oom.Path)
	if err != nil {
		w.f.Close()
		return fmt.Errorf("cgroupacct: %w", err)
	}
	w.extra = ctl
	reg := fmt.Sprintf("%d %d", efd, ctl.Fd())
	if err := os.WriteFile(filepath.Join(filepath.Dir(w.oom.Path), "cgroup.event_control"), []byte(reg), 0); err != nil {
		w.Close()
		return fmt.Errorf("cgroupacct: register oom notification: %w", err)
	}
	return nil
}

// counts reads the oom and oom_kill counts of a v2 memory.events.
func (w *OOMWatch) counts() ([2]int64, bool) {
	data, err := os.ReadFile(w.oom.Path)
	if err != nil {
		return [2]int64{}, false
	}
	oom, _ := parseCount(string(data), "oom")
	kill, _ := parseCount(string(data), "oom_kill")
	return [2]int64{oom, kill}, true
}

// loop looks at each v1 notification until the group goes or Close: the
// group running out of memory or the group's removal (then its file no
// longer reads). A notification comes before the kill, whose counter may
// not have moved yet, so each counts as one kill: the count rises with
// every time the group ran out, which is what a reader compares.
func (w *OOMWatch) loop() {
	buf := make([]byte, 8)
	for {
		if _, err := w.f.Read(buf); err != nil {
			return
		}
		n, ok := w.oom.Read()
		if !ok {
			return
		}
		// The eventfd's value is the number of notifications since the
		// last read.
		w.raise(max(w.kills.Load()+int64(binary.NativeEndian.Uint64(buf)), n))
	}
}

// check looks at a v2 group's counts after memory.events changed: a kill,
// or the group running out when the killer found nothing to kill.
func (w *OOMWatch) check() {
	if c, ok := w.counts(); ok {
		w.raise(w.base[1] + max(c[0]-w.base[0], c[1]-w.base[1]))
	}
}

// raise sets the count to n unless it is higher already.
func (w *OOMWatch) raise(n int64) {
	for {
		old := w.kills.Load()
		if n <= old || w.kills.CompareAndSwap(old, n) {
			return
		}
	}
}

// Kills returns the kills the watch counted, on the scale of the group's
// oom_kill counter: the counter's value when the watch began plus each
// time since that the group ran out of memory. It stays once the group
// is gone.
func (w *OOMWatch) Kills() int64 {
	if w == nil {
		return 0
	}
	return w.kills.Load()
}

// Close stops watching, with a last look at the group's counts: a kill
// whose event the watch had not read yet still counts while the group's
// file reads.
func (w *OOMWatch) Close() {
	if w == nil {
		return
	}
	if !w.v1 {
		w.check()
	} else if n, ok := w.oom.Read(); ok {
		w.raise(n)
	}
	if w.by != nil {
		w.by.remove(w)
	}
	if w.f != nil {
		w.f.Close()
	}
	if w.extra != nil {
		w.extra.Close()
	}
}

// OOMSlot holds the OOM watch of one sandbox through its life. The watch
// is made once the sandbox's control group is known, which may be after
// the sandbox ended; the end closes the watch, and one set after the end
// is closed at once. The zero OOMSlot is empty.
type OOMSlot struct {
	mu    sync.Mutex
	w     *OOMWatch
	ended bool
}

// Set keeps w as the sandbox's watch, or closes it when the sandbox has
// ended already.
func (s *OOMSlot) Set(w *OOMWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		w.Close()
		return
	}
	s.w = w
}

// End stops watching: the sandbox has ended.
func (s *OOMSlot) End() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	s.w.Close()
}

// Kills counts the sandbox's memory kills: live's counter while the
// group is there, and once its runtime removed it with the sandbox, what
// the watch counted until then; ok is false when neither is known. A
// reader compares two counts taken around a command: the second is higher
// when the group ran out of memory in between, even if the sandbox died
// of it and took its group along.
func (s *OOMSlot) Kills(live OOM) (n int64, ok bool) {
	n, ok = live.Read()
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	if w != nil {
		if k := w.Kills(); !ok || k > n {
			return k, true
		}
	}
	return n, ok
}
