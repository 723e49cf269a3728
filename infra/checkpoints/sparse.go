package checkpoints

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The blob of a sparse file of a mirror (Entry.Extents) holds only its
// data: sparseMagic, the file's size (8 bytes, big-endian), then each of
// its data extents in order as its offset and length (8 bytes each,
// big-endian) followed by its bytes, and last an extent of length 0 at
// the file's size. A restore writes each extent where it lies and sets
// the size: what lies between is a hole again, so the file reads exactly
// as it did and takes no more room on the host that fetches it than on
// the one that sent it. Older mirrors, whose files are all blobs of their
// content, restore as they always did.

// sparseMagic begins the blob of a sparse file.
const sparseMagic = "threadbox sparse file 1\n"

// hasHole tells whether the file system reports a hole in f's first size
// bytes. It moves f's offset: f is read at offsets after it.
func hasHole(f *os.File, size int64) (bool, error) {
	if size <= 0 {
		return false, nil
	}
	hole, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE)
	if errors.Is(err, unix.ENXIO) { // emptied meanwhile
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return hole < size, nil
}

// encodeSparse writes the blob of f's first size bytes as a sparse file's
// (SEEK_DATA, SEEK_HOLE): nothing of its holes is read or written. An
// extent that shrinks while it is read is ended with zeros, as its
// length was written already; a file that shrinks holds zeros past its
// end, as the manifest keeps its size.
func encodeSparse(w io.Writer, f *os.File, size int64) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	extent := func(off, n int64) error {
		_, err := bw.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(off)), uint64(n)))
		return err
	}
	if _, err := bw.WriteString(sparseMagic); err != nil {
		return err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint64(nil, uint64(size))); err != nil {
		return err
	}
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // a hole to the end
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoints: files: seek data: %w", err)
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if errors.Is(err, unix.ENXIO) { // shrunk meanwhile
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoints: files: seek hole: %w", err)
		}
		hole = min(hole, size)
		if err := extent(data, hole-data); err != nil {
			return err
		}
		n, err := io.Copy(bw, io.NewSectionReader(f, data, hole-data))
		if err != nil {
			return err
		}
		if _, err := io.CopyN(bw, zeroReader{}, hole-data-n); err != nil {
			return err
		}
		off = hole
	}
	if err := extent(size, 0); err != nil {
		return err
	}
	return bw.Flush()
}

// decodeSparse writes the sparse file's blob r, of a file of size bytes,
// into out (new and empty): its data extents where they lie, and out
// then cut at size. A blob that is not one, of another size, or whose
// extents are out of order or beyond the size is refused.
func decodeSparse(out *os.File, r io.Reader, size int64) error {
	br := bufio.NewReaderSize(r, 64<<10)
	head := make([]byte, len(sparseMagic)+8)
	if _, err := io.ReadFull(br, head); err != nil {
		return fmt.Errorf("a sparse file's blob: %w", err)
	}
	if string(head[:len(sparseMagic)]) != sparseMagic {
		return errors.New("not a sparse file's blob")
	}
	if n := binary.BigEndian.Uint64(head[len(sparseMagic):]); n != uint64(size) {
		return fmt.Errorf("a sparse file's blob of %d bytes, the manifest says %d", n, size)
	}
	var ext [16]byte
	for end := uint64(0); ; {
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return fmt.Errorf("a sparse file's blob: %w", err)
		}
		off, n := binary.BigEndian.Uint64(ext[:8]), binary.BigEndian.Uint64(ext[8:])
		if n == 0 && off == uint64(size) {
			break
		}
		if n == 0 || off < end || off > uint64(size) || n > uint64(size)-off {
			return fmt.Errorf("a sparse file's blob: an extent of %d bytes at %d", n, off)
		}
		if _, err := io.CopyN(io.NewOffsetWriter(out, int64(off)), br, int64(n)); err != nil {
			return fmt.Errorf("a sparse file's blob: %w", err)
		}
		end = off + n
	}
	switch _, err := br.ReadByte(); {
	case err == nil:
		return errors.New("a sparse file's blob: bytes after its end")
	case err != io.EOF:
		return fmt.Errorf("a sparse file's blob: %w", err)
	}
	return out.Truncate(size)
}

// zeroReader reads as zeros.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
