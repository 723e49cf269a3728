package cgroupacct

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// OOMWatch notes, as they happen, the kills a memory cgroup makes for
// memory: for a sandbox that dies of it with its control group, whose
// counter can no longer be read once its runtime removed the group.
// Cgroup v1 registers an eventfd for memory.oom_control notifications;
// cgroup v2 watches memory.events with inotify.
type OOMWatch struct {
	oom    OOM
	v1     bool
	base   [2]int64 // the oom and oom_kill counts of memory.events at the start (v2)
	killed atomic.Bool
	f      *os.File
	extra  *os.File // the oom_control file a v1 registration names
}

// WatchOOM starts watching o. The zero OOM cannot be watched.
func WatchOOM(o OOM) (*OOMWatch, error) {
	if _, ok := o.Read(); !ok {
		return nil, errors.New("cgroupacct: no oom_kill counter to watch")
	}
	w := &OOMWatch{oom: o, v1: filepath.Base(o.Path) == "memory.oom_control"}
	var err error
	if w.v1 {
		err = w.eventfd()
	} else {
		w.base, _ = w.counts()
		err = w.inotify()
	}
	if err != nil {
		return nil, err
	}
	go w.loop()
	return w, nil
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

// inotify watches the v2 group's memory.events for changes.
func (w *OOMWatch) inotify() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroupacct: inotify: %w", err)
	}
	w.f = os.NewFile(uintptr(fd), "oom-inotify")
	if _, err := unix.InotifyAddWatch(fd, w.oom.Path, unix.IN_MODIFY); err != nil {
		w.f.Close()
		return fmt.Errorf("cgroupacct: watch %s: %w", w.oom.Path, err)
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

// loop looks at each notification until the group goes or Close. A v1
// notification is the group running out of memory (it comes before the
// kill, whose counter may not have moved yet) or the group's removal
// (then its file no longer reads); a v2 one, any change of memory.events.
func (w *OOMWatch) loop() {
	buf := make([]byte, 4096)
	for {
		if _, err := w.f.Read(buf); err != nil {
			return
		}
		if w.v1 {
			if _, ok := w.oom.Read(); !ok {
				return
			}
			w.killed.Store(true)
			continue
		}
		c, ok := w.counts()
		if !ok {
			return
		}
		if c[0] > w.base[0] || c[1] > w.base[1] {
			w.killed.Store(true)
		}
	}
}

// Killed reports whether the group ran out of memory since the watch
// began.
func (w *OOMWatch) Killed() bool {
	if w == nil {
		return false
	}
	return w.killed.Load()
}

// Close stops watching.
func (w *OOMWatch) Close() {
	if w == nil {
		return
	}
	if w.f != nil {
		w.f.Close()
	}
	if w.extra != nil {
		w.extra.Close()
	}
}
