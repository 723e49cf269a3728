package fileop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The body of an OpOpenExtents reply holds only the file's data: each of
// its data extents in order as its offset and length (8 bytes each,
// big-endian) followed by its bytes, and last an extent of length 0 at
// Reply.Info.Size. What lies between two extents is a hole, which reads
// as zeros: a file of terabytes that code made with `truncate -s` crosses
// the stream, and lands on threadbox's disk, as the few blocks it holds.

// DataExtents calls fn with the offset and length of each data extent of
// f's first size bytes, in order, as the file system reports them
// (SEEK_DATA, SEEK_HOLE); a file system that reports no holes has one
// extent of the whole size. It moves f's offset.
func DataExtents(f *os.File, size int64, fn func(off, n int64) error) error {
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // a hole to the end
			return nil
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		if data >= size {
			return nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if errors.Is(err, unix.ENXIO) { // shrunk meanwhile
			return nil
		}
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		hole = min(hole, size)
		if err := fn(data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// writeExtents writes the body of an OpOpenExtents reply for the first
// size bytes of body: its data extents when it is a file, else one extent
// of the whole size. An extent that shrinks while it is read is ended
// with zeros, as its length was sent already.
func writeExtents(w io.Writer, body io.Reader, size int64) error {
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
		err = fmt.Errorf("fileop: %T is not readable at offsets", body)
	}
	if err != nil {
		return err
	}
	return extent(size, 0)
}

// ReadExtents writes the body of an OpOpenExtents reply, of a file of
// size bytes, read from r, into to: each data extent where it lies, so
// that a file to writes holes where the file had them. It reads nothing
// past the final extent. Extents out of order or beyond size are
// refused. The caller sets the size of what to writes into (a file:
// Truncate to size).
func ReadExtents(r io.Reader, size int64, to io.WriterAt) error {
	var ext [16]byte
	for end := uint64(0); ; {
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return fmt.Errorf("fileop: extents: %w", err)
		}
		off, n := binary.BigEndian.Uint64(ext[:8]), binary.BigEndian.Uint64(ext[8:])
		if n == 0 && off == uint64(size) {
			return nil
		}
		if n == 0 || off < end || off > uint64(size) || n > uint64(size)-off {
			return fmt.Errorf("fileop: extents: %d bytes at %d of a file of %d", n, off, size)
		}
		if _, err := io.CopyN(io.NewOffsetWriter(to, int64(off)), r, int64(n)); err != nil {
			return fmt.Errorf("fileop: extents: %w", err)
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
