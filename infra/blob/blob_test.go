package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/fault"
)

func TestPutOpen(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := New(root)
	content := "hello artifact"
	want := sha256.Sum256([]byte(content))
	sum, n, err := s.Put(ctx, strings.NewReader(content))
	if err != nil || sum != hex.EncodeToString(want[:]) || n != int64(len(content)) {
		t.Fatalf("put: %s %d %v", sum, n, err)
	}
	again, _, err := s.Put(ctx, strings.NewReader(content))
	if err != nil || again != sum {
		t.Fatalf("second put: %s %v", again, err)
	}
	f, err := s.Open(ctx, sum)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != content {
		t.Fatalf("read %q", b)
	}
	left, _ := filepath.Glob(filepath.Join(root, ".incoming-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(root, sum[:2], sum)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../../etc/passwd", "ABC", strings.Repeat("0", 64)} {
		_, err := s.Open(ctx, bad)
		if !fault.Is(err, fault.Invalid) && !fault.Is(err, fault.NotFound) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Put(cctx, strings.NewReader("x")); err == nil {
		t.Fatal("put with a cancelled context succeeded")
	}
}

// age sets a blob's last write time to d ago.
func age(t *testing.T, root, sum string, d time.Duration) {
	t.Helper()
	at := time.Now().Add(-d)
	if err := os.Chtimes(filepath.Join(root, sum[:2], sum), at, at); err != nil {
		t.Fatal(err)
	}
}

// TestPutOfStoredContentRestartsItsAge: storing content that is there
// already makes it young again, so a collector sparing young blobs spares
// content an artifact is being saved with right now.
func TestPutOfStoredContentRestartsItsAge(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := New(root)
	sum, _, err := s.Put(ctx, strings.NewReader("shared"))
	if err != nil {
		t.Fatal(err)
	}
	age(t, root, sum, time.Hour)
	if _, _, err := s.Put(ctx, strings.NewReader("shared")); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(root, sum[:2], sum))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(info.ModTime()) > time.Minute {
		t.Fatalf("a second Put left the blob written %v ago", time.Since(info.ModTime()))
	}
	if removed, err := s.Remove(ctx, sum, time.Now().Add(-10*time.Minute)); err != nil || removed {
		t.Fatalf("remove of a blob just put again: %v %v", removed, err)
	}
}

func TestRemove(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name          string
		sum           string // "" means the stored blob's
		age           time.Duration
		writtenBefore time.Time
		removed       bool
		invalid       bool
	}{
		{name: "older than the cutoff", age: time.Hour, writtenBefore: time.Now().Add(-10 * time.Minute), removed: true},
		{name: "younger than the cutoff", age: time.Minute, writtenBefore: time.Now().Add(-10 * time.Minute)},
		{name: "no cutoff", age: 0, removed: true},
		{name: "missing", sum: strings.Repeat("ab", 32), removed: false},
		{name: "not a digest", sum: "../../etc/passwd", invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			s := New(root)
			stored, _, err := s.Put(ctx, strings.NewReader("content"))
			if err != nil {
				t.Fatal(err)
			}
			age(t, root, stored, tt.age)
			sum := tt.sum
			if sum == "" {
				sum = stored
			}
			removed, err := s.Remove(ctx, sum, tt.writtenBefore)
			if tt.invalid {
				if !fault.Is(err, fault.Invalid) {
					t.Fatalf("err = %v, want invalid", err)
				}
				return
			}
			if err != nil || removed != tt.removed {
				t.Fatalf("Remove = %v, %v; want %v", removed, err, tt.removed)
			}
			_, err = os.Stat(filepath.Join(root, stored[:2], stored))
			if gone := errors.Is(err, os.ErrNotExist); gone != (tt.sum == "" && tt.removed) {
				t.Fatalf("stored blob gone = %v (%v)", gone, err)
			}
		})
	}
}

// TestWalk lists stored blobs with their write times, and nothing else
// found under the root.
func TestWalk(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := New(root)
	if err := s.Walk(ctx, func(string, time.Time) error { return errors.New("called") }); err != nil {
		t.Fatalf("walk of a store never written: %v", err)
	}
	want := map[string]time.Duration{}
	for i, c := range []string{"one", "two", "three"} {
		sum, _, err := s.Put(ctx, strings.NewReader(c))
		if err != nil {
			t.Fatal(err)
		}
		want[sum] = time.Duration(i+1) * time.Hour
		age(t, root, sum, want[sum])
	}
	// A partial write, a stray file and a misplaced digest are not blobs.
	for _, p := range []string{".incoming-123", "ab/notes.txt", "ab/" + strings.Repeat("cd", 32)} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]time.Duration{}
	if err := s.Walk(ctx, func(sum string, written time.Time) error {
		got[sum] = time.Since(written).Round(time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("walk = %v, want %v", got, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := s.Walk(ctx, func(string, time.Time) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("walk stopping at the first error: %v after %d calls", err, n)
	}
}
