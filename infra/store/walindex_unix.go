//go:build unix

package store

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// walIndex tells whether anything was committed to a SQLite database in
// WAL mode since it last looked, by reading the header of the database's
// WAL index (its -shm file) through a read-only shared mapping: no system
// call. Every connection of every process maps that file, and a commit
// writes the header's two 48-byte copies (the second first, then the
// first; the copies carry a counter of transactions, the WAL's last
// committed frame and its salts, so every commit and every WAL reset
// changes them) before the commit returns. A look that reads the header
// as it was, both copies alike, therefore proves that no commit returned
// in between, whoever made it; a look that races a commit reads the old
// header (the commit has not returned) or copies that differ (counted as
// a change). The file stays in place and keeps its size while a
// connection is attached (each holds the database's shared lock, so none
// can take the exclusive lock that deletes or truncates it), so the memo
// maps it only while its own connection is open.
type walIndex struct {
	mem  []byte
	last [walHeaderWords]uint32
	seen bool
}

// walHeaderWords is the two copies of the WAL index's header, in 32-bit
// words (bytes 0 to 95 of the -shm file).
const walHeaderWords = 24

// openWALIndex maps the header of the WAL index at path (a database's
// -shm file).
func openWALIndex(path string) (*walIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store: wal index: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("store: wal index: %w", err)
	}
	if fi.Size() < 4*walHeaderWords {
		return nil, fmt.Errorf("store: wal index %s: %d bytes, no header yet", path, fi.Size())
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4*walHeaderWords, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("store: map wal index: %w", err)
	}
	return &walIndex{mem: mem}, nil
}

// quiet reports whether nothing was committed since the last call, and
// remembers the header it read. The first call, and any call that finds
// the two copies unlike, reports a change.
func (w *walIndex) quiet() bool {
	var h [walHeaderWords]uint32
	// The first copy before the second: the reverse of the writer's
	// order, so a look overlapping a commit sees them unlike.
	for i := range h {
		h[i] = atomic.LoadUint32((*uint32)(unsafe.Pointer(&w.mem[4*i])))
	}
	alike := [walHeaderWords / 2]uint32(h[:walHeaderWords/2]) == [walHeaderWords / 2]uint32(h[walHeaderWords/2:])
	q := alike && w.seen && h == w.last
	w.last, w.seen = h, true
	return q
}

func (w *walIndex) close() { _ = unix.Munmap(w.mem) }
