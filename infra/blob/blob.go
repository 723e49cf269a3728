// Package blob is the content-addressed artifact store: files kept under a
// root folder by the hex SHA-256 of their content (root/ab/abcdef...), so
// the same content is stored once and never changes once written.
//
// A blob's modification time is when it was last written: a Put of content
// already stored sets it to now. Remove can spare blobs written after a
// cutoff, and it decides under the same lock as Put's last step, so a
// collector that only removes blobs older than a grace period never removes
// one that a Put has just handed back to its caller.
//
// Two adapters keep the same keys: Store, a folder on the local disk (the
// embedded default, DATA_DIR/artifacts), and S3, a bucket of any
// S3-compatible object store (BLOB_URL=s3://...), which every replica of a
// scaled-out deployment shares.
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
	"sync"
	"time"

	"threadbox/domain/fault"
)

// Store keeps blobs under one folder.
type Store struct {
	root string
	// mu orders the end of a Put (install or touch) against Remove.
	mu sync.Mutex
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
	sum, n, err := copyHashed(ctx, tmp, r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("blob: write: %w", err)
	}
	dst := s.path(sum)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(dst); err == nil {
		// Stored already: its age restarts, as a new write's would.
		now := time.Now()
		if err := os.Chtimes(dst, now, now); err != nil {
			return "", 0, fmt.Errorf("blob: touch: %w", err)
		}
		return sum, n, nil
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", 0, fmt.Errorf("blob: store: %w", err)
	}
	return sum, n, nil
}

// Walk calls fn with the SHA-256 and the last write time of every stored
// blob, one two-character folder at a time (partial writes are skipped).
// It stops at fn's first error and returns it.
func (s *Store) Walk(ctx context.Context, fn func(sum string, written time.Time) error) error {
	shards, err := os.ReadDir(s.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob: list: %w", err)
	}
	for _, sh := range shards {
		if !sh.IsDir() || len(sh.Name()) != 2 {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(s.root, sh.Name()))
		if err != nil {
			return fmt.Errorf("blob: list: %w", err)
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return err
			}
			sum := e.Name()
			if !e.Type().IsRegular() || !digest.MatchString(sum) || sum[:2] != sh.Name() {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, os.ErrNotExist) {
				continue // removed meanwhile
			}
			if err != nil {
				return fmt.Errorf("blob: list: %w", err)
			}
			if err := fn(sum, info.ModTime()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes the blob with the given SHA-256 if it was last written
// before writtenBefore, and reports whether it did; a zero writtenBefore
// removes it whatever its age. A missing blob is not an error.
func (s *Store) Remove(_ context.Context, sum string, writtenBefore time.Time) (bool, error) {
	if !digest.MatchString(sum) {
		return false, fault.New(fault.Invalid, "blob: not a sha256 digest")
	}
	p := s.path(sum)
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("blob: remove: %w", err)
	}
	if !writtenBefore.IsZero() && !info.ModTime().Before(writtenBefore) {
		return false, nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("blob: remove: %w", err)
	}
	return true, nil
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

// copyHashed copies r to w until ctx ends and returns the hex SHA-256 of
// what it copied, the name a blob is stored under, and its size.
func copyHashed(ctx context.Context, w io.Writer, r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), readerCtx{ctx, r})
	return hex.EncodeToString(h.Sum(nil)), n, err
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

// Ready reports whether the store's folder can be used (it is made when
// missing).
func (s *Store) Ready(context.Context) error {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return fault.Wrap(fault.Unavailable, "the artifact store is unavailable", err)
	}
	return nil
}
