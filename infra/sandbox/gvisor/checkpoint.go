package gvisor

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
)

// Checkpoints answers that sandboxes keep files only across a stop.
func (b *Backend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly("files only: this build does not checkpoint gVisor sandboxes")
}

// Checkpoint is unsupported.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("gvisor: %w", b.Checkpoints(ctx).Err())
}

// Restore is unsupported.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("gvisor: %w", b.Checkpoints(ctx).Err())
}
