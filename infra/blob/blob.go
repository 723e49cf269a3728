// Package blob is the content-addressed artifact store: files kept under a
// root folder by the hex SHA-256 of their content (root/ab/abcdef...), so
// the same content is stored once and never changes once written.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"threadbox/domain/fault"
)

// Store keeps blobs under one folder.
type Store struct {
	root string
}

// New returns the store rooted at root (created on first write).
func New(root string) *Store { return &Store{root: root} }

var digest = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Store) path(sum string) string {
	return filepath.Join(s.root, sum[:2], sum)
}

// Put copies r into the store and returns its SHA-256 (hex) and size. The
// content is written to a temporary file and renamed into place, so a blob
// is either absent or whole.
func (s *Store) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	tmp, err := os.CreateTemp(s.root, ".incoming-*")
	if err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), readerCtx{ctx, r})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("blob: write: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	dst := s.path(sum)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	if _, err := os.Stat(dst); err == nil {
		return sum, n, nil
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", 0, fmt.Errorf("blob: store: %w", err)
	}
	return sum, n, nil
}

// Open opens the blob with the given SHA-256.
func (s *Store) Open(_ context.Context, sum string) (io.ReadSeekCloser, error) {
	if !digest.MatchString(sum) {
		return nil, fault.New(fault.Invalid, "blob: not a sha256 digest")
	}
	f, err := os.Open(s.path(sum))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fault.Wrap(fault.NotFound, "content not found", err)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: open: %w", err)
	}
	return f, nil
}

// readerCtx stops a copy once ctx ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
