package unsupported

import (
	"context"
	"errors"
	"strings"
	"testing"

	"threadbox/domain/sandbox"
)

// TestCheckpointsUnsupported: a backend that cannot run takes no
// checkpoint, and says it cannot run and what it needs.
func TestCheckpointsUnsupported(t *testing.T) {
	ctx := context.Background()
	for _, b := range []*Backend{mustNew(t, "e2b"), Broken("docker", errors.New("docker: client: bad DOCKER_HOST"))} {
		t.Run(b.Name(), func(t *testing.T) {
			c := b.Checkpoints(ctx)
			if c.Supported || !strings.Contains(c.Reason, b.err.Error()) {
				t.Errorf("Checkpoints = %+v, want unsupported naming %q", c, b.err)
			}
			if err := b.Checkpoint(ctx, "x", t.TempDir()); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Errorf("Checkpoint = %v", err)
			}
			if err := b.Restore(ctx, sandbox.Spec{ID: "x"}, t.TempDir()); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Errorf("Restore = %v", err)
			}
		})
	}
}

func mustNew(t *testing.T, name string) *Backend {
	t.Helper()
	b, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
