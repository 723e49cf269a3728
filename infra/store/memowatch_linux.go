//go:build linux

package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// dirWatch reports whether any file of a folder was written, created,
// removed or renamed since it last looked (inotify). The kernel queues an
// event within the write itself, before the writer's commit returns, so a
// look that finds none proves that no commit reached the database's files
// in between — whoever made it, this process or another.
type dirWatch struct {
	fd  int
	buf []byte
}

// watchDir watches the files of dir.
func watchDir(dir string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("store: inotify: %w", err)
	}
	const events = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_MOVED_FROM | unix.IN_MOVED_TO
	if _, err := unix.InotifyAddWatch(fd, dir, events); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("store: watch %s: %w", dir, err)
	}
	return &dirWatch{fd: fd, buf: make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))}, nil
}

// quiet reports whether nothing happened to the folder's files since the
// last call, and forgets what did. Anything it cannot tell (a read error,
// a queue overflow, which the kernel reports as an event) counts as a
// change.
func (w *dirWatch) quiet() bool {
	changed := false
	for {
		n, err := unix.Read(w.fd, w.buf)
		if n > 0 {
			changed = true
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return !changed && errors.Is(err, unix.EAGAIN)
	}
}

func (w *dirWatch) close() { unix.Close(w.fd) }
