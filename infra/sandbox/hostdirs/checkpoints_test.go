package hostdirs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckpointFolder: a checkpoint counts only once sealed, says which
// backend took it, starts empty when taken again, and goes with the
// container.
func TestCheckpointFolder(t *testing.T) {
	ctx := context.Background()
	l := New(t.TempDir(), Options{})
	id := "user/ckpt"
	if _, _, ok := l.Checkpoint(ctx, id); ok {
		t.Fatal("a checkpoint before any was taken")
	}
	dir, err := l.EmptyCheckpoint(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("checkpoint folder %v %v, want mode 0700", fi, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("memory"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := l.Checkpoint(ctx, id); ok {
		t.Fatal("an unsealed checkpoint counts")
	}
	if err := l.SealCheckpoint(ctx, id, "gvisor"); err != nil {
		t.Fatal(err)
	}
	got, backend, ok := l.Checkpoint(ctx, id)
	if !ok || got != dir || backend != "gvisor" {
		t.Fatalf("Checkpoint = %q %q %v, want %q gvisor", got, backend, ok, dir)
	}
	if _, err := l.EmptyCheckpoint(ctx, id); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("taken again, the folder still holds %v", entries)
	}
	if err := l.SealCheckpoint(ctx, id, "gvisor"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prepare(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("checkpoint left after the container's removal: %v", err)
	}
	if err := l.DropCheckpoint(ctx, id); err != nil {
		t.Fatalf("dropping what is gone: %v", err)
	}
}
