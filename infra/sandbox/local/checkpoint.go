package local

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
)

// checkpointReason says why a jail keeps files only.
const checkpointReason = "files only: a jail's processes are host processes, which only CRIU could save, and threadbox does not drive CRIU for jails"

// Checkpoints answers that jails keep files only across a stop.
func (b *Backend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly(checkpointReason)
}

// Checkpoint is unsupported: a jail keeps files only.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("local: %w", b.Checkpoints(ctx).Err())
}

// Restore is unsupported: a jail keeps files only.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("local: %w", b.Checkpoints(ctx).Err())
}
