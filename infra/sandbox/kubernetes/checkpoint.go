package kubernetes

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
)

// checkpointReason says why a pod keeps files only.
const checkpointReason = "files only: Kubernetes cannot restore a pod from a checkpoint (the kubelet's checkpoint API writes an archive for forensics only); a stopped pod boots fresh over its claim"

// Checkpoints answers that pods keep files only across a stop.
func (b *Backend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly(checkpointReason)
}

// Checkpoint is unsupported: a pod keeps files only.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("kubernetes: %w", b.Checkpoints(ctx).Err())
}

// Restore is unsupported: a pod keeps files only.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("kubernetes: %w", b.Checkpoints(ctx).Err())
}
