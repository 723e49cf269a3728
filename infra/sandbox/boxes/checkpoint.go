package boxes

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
)

// FilesOnly answers for a backend whose sandboxes keep their files only
// across a stop: a backend embeds it for its checkpoint methods.
type FilesOnly struct {
	name, reason string
}

// KeepsFilesOnly returns the checkpoint answers of the backend name, whose
// sandboxes keep files only for reason.
func KeepsFilesOnly(name, reason string) FilesOnly {
	return FilesOnly{name: name, reason: reason}
}

// Checkpoints answers that sandboxes keep files only across a stop.
func (f FilesOnly) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly(f.reason)
}

// Checkpoint is unsupported: a sandbox keeps files only.
func (f FilesOnly) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("%s: %w", f.name, f.Checkpoints(ctx).Err())
}

// CheckpointRunning is unsupported: a sandbox keeps files only.
func (f FilesOnly) CheckpointRunning(ctx context.Context, id, dir string) error {
	return fmt.Errorf("%s: %w", f.name, f.Checkpoints(ctx).Err())
}

// Restore is unsupported: a sandbox keeps files only.
func (f FilesOnly) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("%s: %w", f.name, f.Checkpoints(ctx).Err())
}
