package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctor: threadbox doctor names what is missing, each with its fix,
// and passes when nothing is.
func TestDoctor(t *testing.T) {
	bin := needDocker(t)
	base := func(extra map[string]string) func(string) string {
		env := map[string]string{"DATA_DIR": filepath.Join(t.TempDir(), "data"), "SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "SANDBOX_DISK_QUOTA": "none"}
		for k, v := range extra {
			env[k] = v
		}
		return func(k string) string { return env[k] }
	}
	tests := []struct {
		name  string
		env   map[string]string
		fails bool
		want  []string
	}{
		{"all there", nil, false, []string{"ok   database", "ok   backend docker", "available (namespaces)"}},
		{"no image", map[string]string{"SANDBOX_IMAGE": "threadbox-no-such-image:none"}, true,
			[]string{"FAIL backend docker", "threadbox-no-such-image:none", "fix: start Docker", "make sandbox-image"}},
		{"no agent", map[string]string{"THREADBOX_AGENT_BIN": "/nonexistent/threadbox-agent"}, true,
			[]string{"FAIL backend docker", "agent binary", "make agent"}},
		{"no database", map[string]string{"DATABASE_URL": "postgres://threadbox@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"}, true,
			[]string{"FAIL database", "fix: start the database"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{"doctor"}, base(tt.env), &out, io.Discard)
			if (err != nil) != tt.fails {
				t.Fatalf("doctor: %v\n%s", err, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("doctor printed\n%s\nwant %q", out.String(), w)
				}
			}
		})
	}
}
