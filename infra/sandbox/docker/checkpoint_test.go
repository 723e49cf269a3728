package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/client"

	"threadbox/domain/sandbox"
)

// TestCheckpoints: a Docker sandbox keeps files only, and the answer says
// why for its runtime: CRIU missing or failing its check under runc, the
// gvisor backend to use under runsc.
func TestCheckpoints(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	failing := script("criu-failing", `if [ "$1" = --version ]; then echo "Version: 3.17.1"; exit 0; fi
echo "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds" >&2; exit 1`)
	working := script("criu-working", `if [ "$1" = --version ]; then echo "Version: 4.1"; exit 0; fi
echo "Looks good."`)
	tests := []struct {
		name, runtime, criu string
		reason              []string
	}{
		{"runc without CRIU", "runc", filepath.Join(dir, "absent"), []string{"files only", "CRIU is not installed"}},
		{"runc with a failing CRIU", "runc", failing, []string{"files only", "`criu check` fails", "CRIU 3.17.1", "vDSO"}},
		{"runc with a working CRIU", "runc", working, []string{"files only", "CRIU works on this host", "experimental"}},
		{"runsc", "runsc", working, []string{"files only", "SANDBOX_BACKEND=gvisor"}},
	}
	cli, err := client.NewClientWithOpts()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewWithClient(cli, Config{Runtime: tt.runtime})
			b.criu.bin = tt.criu
			c := b.Checkpoints(ctx)
			if c.Supported {
				t.Fatalf("Checkpoints = %+v, want files only", c)
			}
			for _, w := range tt.reason {
				if !strings.Contains(c.Reason, w) {
					t.Errorf("reason %q lacks %q", c.Reason, w)
				}
			}
			if err := b.Checkpoint(ctx, "x", t.TempDir()); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), c.Reason) {
				t.Errorf("Checkpoint = %v, want unsupported with the reason", err)
			}
			if err := b.Restore(ctx, sandbox.Spec{ID: "x"}, t.TempDir()); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Errorf("Restore = %v, want unsupported", err)
			}
		})
	}
}
