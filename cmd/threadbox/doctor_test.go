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
		{"all there", nil, false, []string{"ok   database", "ok   backend docker", "available (namespaces)", "files only across a stop (files only: a runc sandbox"}},
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

// TestDoctorGvisor: under the gvisor backend doctor says the backend is
// available and keeps its sandboxes' life (checkpoints), and names the
// fix when the root filesystem is missing.
func TestDoctorGvisor(t *testing.T) {
	bin := needGvisor(t)
	env := func(extra map[string]string) func(string) string {
		e := map[string]string{"DATA_DIR": filepath.Join(t.TempDir(), "data"), "SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "SANDBOX_DISK_QUOTA": "none", "THREADBOX_INSTANCE": gvisorInstance(t)}
		for k, v := range extra {
			e[k] = v
		}
		return func(k string) string { return e[k] }
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"doctor"}, env(nil), &out, io.Discard); err != nil {
		t.Fatalf("doctor: %v\n%s", err, out.String())
	}
	for _, w := range []string{"ok   backend gvisor", "checkpoints: gVisor checkpoint and restore"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("doctor printed\n%s\nwant %q", out.String(), w)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"doctor"}, env(map[string]string{"THREADBOX_ROOTFS": filepath.Join(t.TempDir(), "none")}), &out, io.Discard); err == nil {
		t.Fatalf("doctor passed without a root filesystem:\n%s", out.String())
	}
	for _, w := range []string{"FAIL backend gvisor", "fix: run as root with runsc installed", "--rootfs-only"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("doctor printed\n%s\nwant %q", out.String(), w)
		}
	}
}
