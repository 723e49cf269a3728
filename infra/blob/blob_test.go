package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
