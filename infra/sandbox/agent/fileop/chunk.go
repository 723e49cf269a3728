package fileop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxChunkSize bounds one chunk of a write's stdin.
const MaxChunkSize = 1 << 20

// ErrCutShort reports a write's stdin that ended before its end mark.
var ErrCutShort = errors.New("fileop: upload cut short")

// EncodeChunk returns b as one chunk of a write's stdin: its length
// (uint32, big endian), then b. An empty b is the end mark. b must not be
// longer than MaxChunkSize.
func EncodeChunk(b []byte) []byte {
	out := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	return append(out, b...)
}

// chunkReader decodes a write's chunked stdin: io.EOF after the end mark,
// ErrCutShort when the stream ends before it.
type chunkReader struct {
	r    io.Reader
	left uint32 // bytes left of the current chunk
	done bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	for c.left == 0 {
		var h [4]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return 0, cutShort(err)
		}
		n := binary.BigEndian.Uint32(h[:])
		if n == 0 {
			c.done = true
			return 0, io.EOF
		}
		if n > MaxChunkSize {
			return 0, fmt.Errorf("fileop: chunk of %d bytes", n)
		}
		c.left = n
	}
	if uint32(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= uint32(n)
	if err != nil && (c.left > 0 || !errors.Is(err, io.EOF)) {
		return n, cutShort(err)
	}
	return n, nil
}

func cutShort(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrCutShort
	}
	return fmt.Errorf("fileop: read upload: %w", err)
}
