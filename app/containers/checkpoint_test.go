package containers

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
)

// Checkpoints answers that the fake keeps files only.
func (b *fakeBackend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly("files only: the fake keeps none")
}

// Checkpoint is unsupported.
func (b *fakeBackend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("fake: %w", b.Checkpoints(ctx).Err())
}

// Restore is unsupported.
func (b *fakeBackend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("fake: %w", b.Checkpoints(ctx).Err())
}
