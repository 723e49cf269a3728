package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/infra/sandbox/sandboxtest"
)

// A template's agent runs the warm-up command inside the root filesystem
// it is given (chrooted there) through its reaper; a root without the
// command's shell is an error, not a silent success.
func TestWarmRootRunsTheWarmUpInTheRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		sandboxtest.Need(t, "the warm-up's chroot needs root")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rp := newReaper(slog.New(slog.NewTextHandler(io.Discard, nil)))
	go rp.loop(ctx)
	a := &agent{ctx: ctx, rp: rp}
	if err := a.warmRoot("/"); err != nil {
		t.Fatalf("warm-up in the host's root: %v", err)
	}
	empty := t.TempDir()
	if err := a.warmRoot(empty); err == nil || !strings.Contains(err.Error(), "bash") {
		t.Fatalf("warm-up in a root without bash: %v", err)
	}
	// A shell that fails is reported: here "bash" is a script that exits 3.
	bin := filepath.Join(empty, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "bash"), []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.warmRoot(empty); err == nil {
		t.Fatal("a warm-up whose shell cannot run was taken")
	}
}
