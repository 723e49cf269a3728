package microvm

import (
	"context"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

func TestSmoke(t *testing.T) {
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	start := time.Now()
	if err := b.Ensure(ctx, sandbox.Spec{ID: "smoke", Limits: sandbox.Limits{MemoryBytes: 512 << 20}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("boot %v", time.Since(start))
	res, err := b.Exec(ctx, "smoke", sandbox.Command{Args: []string{"bash", "-c", "id; uname -r; mount; cat /proc/meminfo | head -2"}})
	t.Logf("%s %s %v", res.Stdout, res.Stderr, err)
}
