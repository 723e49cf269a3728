package hostdirs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"os"

	"threadbox/infra/sparse"
)

// A file's digest, in a snapshot's manifest and in what ContainerFiles
// returns, is read from its data alone, so that it costs what the file
// holds, never its size: code in the sandbox makes a file of terabytes
// with a few blocks written (truncate -s 4T) at no cost to its disk
// quota, and hashing its holes as the zeros they read as would take the
// server an hour of a CPU while the container's lock is held.
//
// A file in which the file system reports no hole (SEEK_HOLE) is all
// data, and its digest is what it always was: the hex SHA-256 of its
// content. A file with holes has a sparse digest: sparsePrefix and the
// hex SHA-256 of its non-zero blocks, in order, each as its offset (8
// bytes, big-endian) then its sparseBlock bytes (the last one cut at the
// file's end), and last its size (8 bytes, big-endian). A block is any
// aligned sparseBlock bytes of the content, so that written zeros count
// for as little as a hole: two files with holes and the same content
// have the same digest whatever holes their file systems kept (a copy
// into a file system of larger blocks fills part of them).
//
// The prefix keeps a sparse digest from ever being equal to a plain
// SHA-256: a file with holes compares as changed against a manifest
// written before sparse digests (which hashed its holes as zeros), or
// against the same content held without holes, never as the same by
// mistake. What that costs is a copy where a link would have done, or a
// revert that asks for force.

// sparsePrefix begins the digest of a file with holes.
const sparsePrefix = "sparse-sha256:"

// sparseBlock is the size of the blocks of a sparse digest.
const sparseBlock = 4096

// zeros is a block of zeros.
var zeros = make([]byte, 64<<10)

// contentHash computes a file's digest from the data written to it at
// offsets in increasing order (io.WriterAt); what is not written reads as
// zeros.
type contentHash struct {
	h      hash.Hash
	sparse bool
	next   int64  // plain: the offset hashed up to
	block  []byte // sparse: the block being gathered
	at     int64  // sparse: its offset, -1 for none
}

// newContentHash returns the hash of f, of size bytes: sparse when the
// file system reports a hole in it. It moves f's offset: f is read at
// offsets after it.
func newContentHash(f *os.File, size int64) (*contentHash, error) {
	c := &contentHash{h: sha256.New(), at: -1}
	holes, err := sparse.HasHole(f, size)
	if err != nil {
		return nil, err
	}
	if holes {
		c.sparse, c.block = true, make([]byte, sparseBlock)
	}
	return c, nil
}

// WriteAt feeds p, the content at off; what lies between the end of the
// previous write and off is zeros.
func (c *contentHash) WriteAt(p []byte, off int64) (int, error) {
	if !c.sparse {
		// The file had no hole when its hash began: whatever holes
		// appeared since lie within the data it had.
		if err := hashZeros(c.h, off-c.next); err != nil {
			return 0, err
		}
		c.next = off + int64(len(p))
		return c.h.Write(p)
	}
	n := len(p)
	for len(p) > 0 {
		b := off - off%sparseBlock
		if b != c.at {
			c.flush(sparseBlock)
			c.at = b
		}
		k := copy(c.block[off-b:], p)
		p, off = p[k:], off+int64(k)
	}
	return n, nil
}

// flush hashes the block being gathered, its first n bytes, unless they
// are all zeros, and starts an empty one.
func (c *contentHash) flush(n int64) {
	if c.at < 0 {
		return
	}
	if blk := c.block[:max(0, min(n, sparseBlock))]; !bytes.Equal(blk, zeros[:len(blk)]) {
		c.h.Write(binary.BigEndian.AppendUint64(nil, uint64(c.at)))
		c.h.Write(blk)
	}
	clear(c.block)
	c.at = -1
}

// sum returns the digest of the content written, as a file of size
// bytes.
func (c *contentHash) sum(size int64) string {
	if !c.sparse {
		_ = hashZeros(c.h, size-c.next)
		return hex.EncodeToString(c.h.Sum(nil))
	}
	c.flush(size - c.at)
	c.h.Write(binary.BigEndian.AppendUint64(nil, uint64(size)))
	return sparsePrefix + hex.EncodeToString(c.h.Sum(nil))
}

// hashZeros feeds n zero bytes to h (none when n is not positive).
func hashZeros(h io.Writer, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := h.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// hashFile returns the digest of f and its size as read.
func hashFile(f *os.File) (string, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	h, err := newContentHash(f, fi.Size())
	if err != nil {
		return "", 0, err
	}
	size, err := sparse.CopyExtents(f, fi.Size(), func(off int64) io.Writer { return io.NewOffsetWriter(h, off) })
	if err != nil {
		return "", 0, err
	}
	return h.sum(size), size, nil
}
