// Package revocations keeps, in a folder, the revocations of sandbox
// tokens a server gave up (the database unreachable until it stopped), so
// that the next server to start makes them (app/bridge.Kept). Each token
// is one file named by its id and holding its expiry, written whole
// (a temporary file renamed), so servers sharing the folder never read
// half of one.
package revocations

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Folder keeps revocations in the folder it names.
type Folder struct{ dir string }

// New returns the revocations kept in dir, made when the first is kept.
func New(dir string) Folder { return Folder{dir: dir} }

// Keep records that token id, which expires at expires, is still to be
// revoked; keeping it again replaces the expiry.
func (f Folder) Keep(id string, expires time.Time) error {
	if !validID(id) {
		return fmt.Errorf("revocations: keep: invalid token id %q", id)
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("revocations: keep: %w", err)
	}
	tmp, err := os.CreateTemp(f.dir, ".keep-*")
	if err != nil {
		return fmt.Errorf("revocations: keep: %w", err)
	}
	_, err = tmp.WriteString(expires.UTC().Format(time.RFC3339Nano))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(f.dir, id))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("revocations: keep: %w", err)
	}
	return nil
}

// Kept returns the kept tokens' ids and expiries; none when the folder
// does not exist. A file whose expiry does not read is returned as
// unexpired (unreadableExpiry from now): revoking a token once more is
// harmless, leaving a live one unrevoked is not.
func (f Folder) Kept() (map[string]time.Time, error) {
	entries, err := os.ReadDir(f.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("revocations: list: %w", err)
	}
	kept := map[string]time.Time{}
	for _, e := range entries {
		if !e.Type().IsRegular() || !validID(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // forgotten meanwhile by another server
		} else if err != nil {
			return nil, fmt.Errorf("revocations: read: %w", err)
		}
		exp, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
		if err != nil {
			exp = time.Now().Add(unreadableExpiry)
		}
		kept[e.Name()] = exp
	}
	return kept, nil
}

// unreadableExpiry is how long ahead a kept file whose expiry does not
// read is taken to expire: longer than any token lives.
const unreadableExpiry = 24 * time.Hour

// Forget removes token id; one not kept is no error.
func (f Folder) Forget(id string) error {
	if !validID(id) {
		return fmt.Errorf("revocations: forget: invalid token id %q", id)
	}
	if err := os.Remove(filepath.Join(f.dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("revocations: forget: %w", err)
	}
	return nil
}

// validID reports whether id can name a file of the folder: token ids are
// a prefix, an underscore and lower-case letters and digits (domain/id).
func validID(id string) bool {
	if id == "" || len(id) > 100 || id[0] == '_' {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
