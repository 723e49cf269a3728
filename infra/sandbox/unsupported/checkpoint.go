package unsupported

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
)

// Checkpoints answers that no checkpoint is taken: the backend cannot run.
func (b *Backend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly("the backend cannot run on this server: " + b.err.Error())
}

// Checkpoint fails: no sandbox runs.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("%w: %w", sandbox.ErrUnsupported, b.err)
}

// CheckpointRunning fails: no sandbox runs.
func (b *Backend) CheckpointRunning(ctx context.Context, id, dir string) error {
	return fmt.Errorf("%w: %w", sandbox.ErrUnsupported, b.err)
}

// Restore fails: no sandbox runs.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("%w: %w", sandbox.ErrUnsupported, b.err)
}
