package checkpoints

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"threadbox/infra/sparse"
)

// The blob of a sparse file of a mirror (Entry.Extents) holds only its
// data: sparseMagic, the file's size (8 bytes, big-endian), then its
// extent stream (infra/sparse: each data extent as its offset, length and
// bytes, and last an extent of length 0 at the file's size). A restore
// writes each extent where it lies and sets the size: what lies between
// is a hole again, so the file reads exactly as it did and takes no more
// room on the host that fetches it than on the one that sent it. Older
// mirrors, whose files are all blobs of their content, restore as they
// always did.

// sparseMagic begins the blob of a sparse file.
const sparseMagic = "threadbox sparse file 1\n"

// encodeSparse writes the blob of f's first size bytes as a sparse file's:
// nothing of its holes is read or written. A file that shrinks meanwhile
// holds zeros past its end, as the manifest keeps its size.
func encodeSparse(w io.Writer, f *os.File, size int64) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(sparseMagic); err != nil {
		return err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint64(nil, uint64(size))); err != nil {
		return err
	}
	if err := sparse.Write(bw, f, size); err != nil {
		return fmt.Errorf("checkpoints: files: %w", err)
	}
	return bw.Flush()
}

// decodeSparse writes the sparse file's blob r, of a file of size bytes,
// into out (new and empty): its data extents where they lie, and out
// then cut at size. A blob that is not one, of another size, whose
// extents are out of order or beyond the size, or with bytes after its
// end is refused.
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
	if err := sparse.Read(br, size, out); err != nil {
		return fmt.Errorf("a sparse file's blob: %w", err)
	}
	switch _, err := br.ReadByte(); {
	case err == nil:
		return errors.New("a sparse file's blob: bytes after its end")
	case err != io.EOF:
		return fmt.Errorf("a sparse file's blob: %w", err)
	}
	return out.Truncate(size)
}
