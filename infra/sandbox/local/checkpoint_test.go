package local

import (
	"context"
	"errors"
	"testing"

	"threadbox/domain/sandbox"
)

// TestCheckpointsFilesOnly: a jail keeps files only, says why, and refuses
// a checkpoint or restore as unsupported.
func TestCheckpointsFilesOnly(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if c := b.Checkpoints(ctx); c.Supported || c.Reason != checkpointReason {
		t.Fatalf("Checkpoints = %+v, want files only with the reason", c)
	}
	if err := b.Checkpoint(ctx, "x", t.TempDir()); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Checkpoint = %v, want unsupported", err)
	}
	if err := b.Restore(ctx, sandbox.Spec{ID: "x"}, t.TempDir()); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Restore = %v, want unsupported", err)
	}
}
