// Package sparse reads and sends files by their data alone. Code in a
// sandbox can make a file of terabytes with a few blocks written
// (`truncate -s 4T`) at no cost to its disk quota; read, copied or sent at
// its size, it would cost the server that size in time and disk. The file
// system says where a file's data lies (SEEK_DATA, SEEK_HOLE), and an
// extent stream carries that data with where it lies, so the copy at the
// other end keeps the holes.
//
// The extent stream: each data extent in order, as its offset and length
// (8 bytes each, big-endian) followed by its bytes, and last an extent of
// length 0 at the file's size. What lies between two extents is a hole,
// which reads as zeros.
package sparse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// DataExtents calls fn with the offset and length of each data extent of
// f's first size bytes, in order, as the file system reports them; a file
// system that reports no holes gives one extent of the whole size. It
// moves f's offset. A file that shrinks meanwhile ends its extents early.
func DataExtents(f *os.File, size int64, fn func(off, n int64) error) error {
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // a hole to the end
			return nil
		}
		if err != nil {
			return fmt.Errorf("sparse: seek data: %w", err)
		}
		if data >= size {
			return nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if errors.Is(err, unix.ENXIO) { // shrunk meanwhile
			return nil
		}
		if err != nil {
			return fmt.Errorf("sparse: seek hole: %w", err)
		}
		hole = min(hole, size)
		if err := fn(data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// HasHole tells whether the file system reports a hole in f's first size
// bytes: a file without one is all data, and is read as it is. It moves
// f's offset: f is read at offsets after it.
func HasHole(f *os.File, size int64) (bool, error) {
	if size <= 0 {
		return false, nil
	}
	hole, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE)
	if errors.Is(err, unix.ENXIO) { // emptied meanwhile
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sparse: seek hole: %w", err)
	}
	return hole < size, nil
}

// DataBytes returns the bytes of the data extents of f's first size
// bytes: what a copy by its data (Write, or a copy that keeps its holes)
// stores, which for a sparse file is far less than its size. It moves
// f's offset.
func DataBytes(f *os.File, size int64) (int64, error) {
	var n int64
	err := DataExtents(f, size, func(_, k int64) error {
		n += k
		return nil
	})
	return n, err
}

// CopyExtents reads in's data extents below size (DataExtents), each
// into the writer to gives for its offset, and returns in's size as read:
// less than size when in shrank meanwhile. Nothing is read for a hole.
func CopyExtents(in *os.File, size int64, to func(off int64) io.Writer) (int64, error) {
	buf := make([]byte, 64<<10)
	got := size
	err := DataExtents(in, size, func(off, n int64) error {
		c, err := io.CopyBuffer(to(off), io.NewSectionReader(in, off, n), buf)
		if err != nil {
			return err
		}
		if c < n { // shrunk meanwhile
			got = off + c
			return errShrunk
		}
		return nil
	})
	if err != nil && !errors.Is(err, errShrunk) {
		return 0, err
	}
	return got, nil
}

// errShrunk ends CopyExtents at the end of a file that shrank meanwhile.
var errShrunk = errors.New("the file shrank")

// Copy makes dst (new and empty) a copy of src by its data alone: each
// data extent is written where it lies, and dst is given src's size, so
// src's holes stay holes. The copy holds src's size when it was stat'ed:
// a file that shrinks meanwhile ends early.
func Copy(dst, src *os.File) error {
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	size, err := CopyExtents(src, fi.Size(), func(off int64) io.Writer { return io.NewOffsetWriter(dst, off) })
	if err != nil {
		return err
	}
	return dst.Truncate(size)
}

// Write writes the extent stream of body's first size bytes to w: its
// data extents when body is a file, else one extent of the whole size
// (body must then read at offsets). An extent that shrinks while it is
// read is ended with zeros, as its length was written already.
func Write(w io.Writer, body io.Reader, size int64) error {
	extent := func(off, n int64) error {
		_, err := w.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(off)), uint64(n)))
		return err
	}
	send := func(r io.ReaderAt) func(off, n int64) error {
		return func(off, n int64) error {
			if err := extent(off, n); err != nil {
				return err
			}
			got, err := io.Copy(w, io.NewSectionReader(r, off, n))
			if err != nil {
				return err
			}
			_, err = io.CopyN(w, zeros{}, n-got)
			return err
		}
	}
	var err error
	switch f := body.(type) {
	case *os.File:
		err = DataExtents(f, size, send(f))
	case io.ReaderAt:
		if size > 0 {
			err = send(f)(0, size)
		}
	default:
		err = fmt.Errorf("sparse: %T is not readable at offsets", body)
	}
	if err != nil {
		return err
	}
	return extent(size, 0)
}

// Read reads the extent stream of a file of size bytes from r into to:
// each data extent where it lies, so that a file to writes into has holes
// where the file had them. It reads nothing past the final extent.
// Extents that are empty, out of order or beyond size are refused. The
// caller sets the size of what to writes into (a file: Truncate to size).
func Read(r io.Reader, size int64, to io.WriterAt) error {
	var ext [16]byte
	for end := uint64(0); ; {
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return fmt.Errorf("sparse: extents: %w", err)
		}
		off, n := binary.BigEndian.Uint64(ext[:8]), binary.BigEndian.Uint64(ext[8:])
		if n == 0 && off == uint64(size) {
			return nil
		}
		if n == 0 || off < end || off > uint64(size) || n > uint64(size)-off {
			return fmt.Errorf("sparse: extents: %d bytes at %d of a file of %d", n, off, size)
		}
		if _, err := io.CopyN(io.NewOffsetWriter(to, int64(off)), r, int64(n)); err != nil {
			return fmt.Errorf("sparse: extents: %w", err)
		}
		end = off + n
	}
}

// zeros reads as zeros.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
