package revocations

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKeepReadForget: a kept revocation is read back with its expiry, by
// another Folder on the same folder (the next start), until forgotten;
// a file whose expiry does not read counts as unexpired; an id that
// could name another file is refused.
func TestKeepReadForget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "revocations")
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	if kept, err := New(dir).Kept(); err != nil || len(kept) != 0 {
		t.Fatalf("kept before any: %v %v", kept, err)
	}
	if err := New(dir).Keep("tok_abc1", exp); err != nil {
		t.Fatal(err)
	}
	kept, err := New(dir).Kept()
	if err != nil || len(kept) != 1 || !kept["tok_abc1"].Equal(exp) {
		t.Fatalf("kept: %v %v", kept, err)
	}
	if err := New(dir).Forget("tok_abc1"); err != nil {
		t.Fatal(err)
	}
	if err := New(dir).Forget("tok_abc1"); err != nil {
		t.Fatalf("forgetting twice: %v", err)
	}
	if kept, err := New(dir).Kept(); err != nil || len(kept) != 0 {
		t.Fatalf("kept after forgetting: %v %v", kept, err)
	}
	// A file whose expiry does not read is still to be revoked.
	if err := os.WriteFile(filepath.Join(dir, "tok_torn1"), []byte("not a time"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kept, err := New(dir).Kept(); err != nil || !kept["tok_torn1"].After(time.Now()) {
		t.Fatalf("a kept file whose expiry does not read: %v %v, want it unexpired", kept, err)
	}
	for _, bad := range []string{"", "../tok_1", ".keep-1", "tok/1", "_x"} {
		if err := New(dir).Keep(bad, exp); err == nil {
			t.Fatalf("kept the id %q", bad)
		}
	}
}
