package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckpointImageMismatch(t *testing.T) {
	base := CheckpointImage{Backend: "gvisor", Runtime: "runsc version 1", RootFS: "/rootfs/abc", Agent: "sha256:1", Targets: FolderTargets()}
	with := func(f func(i *CheckpointImage)) CheckpointImage {
		i := base
		i.Targets = append([]Mount(nil), base.Targets...)
		f(&i)
		return i
	}
	tests := []struct {
		name string
		now  CheckpointImage
		want string // "" restores; else a word of the difference
	}{
		{"same", base, ""},
		{"sources differ", with(func(i *CheckpointImage) { i.Targets[0].Source = "/elsewhere" }), ""},
		{"backend", with(func(i *CheckpointImage) { i.Backend = "docker" }), "backend"},
		{"runtime build", with(func(i *CheckpointImage) { i.Runtime = "runsc version 2" }), "runtime"},
		{"root filesystem", with(func(i *CheckpointImage) { i.RootFS = "/rootfs/def" }), "root filesystem"},
		{"agent", with(func(i *CheckpointImage) { i.Agent = "sha256:2" }), "agent"},
		{"a folder fewer", with(func(i *CheckpointImage) { i.Targets = i.Targets[:3] }), "folders"},
		{"a folder writable", with(func(i *CheckpointImage) { i.Targets[1].ReadOnly = false }), "folders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := base.Mismatch(tt.now)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Mismatch = %v, want none", err)
			case tt.want != "" && (!errors.Is(err, ErrCheckpointIncompatible) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Mismatch = %v, want an incompatible checkpoint naming %q", err, tt.want)
			}
		})
	}
}

func TestCheckpointSupportErr(t *testing.T) {
	tests := []struct {
		name    string
		c       CheckpointSupport
		wantErr bool
		reason  string
	}{
		{"supported", CheckpointSupport{Supported: true, Mechanism: "gVisor"}, false, ""},
		{"files only says why", FilesOnly("files only: no CRIU"), true, "files only: no CRIU"},
		{"no reason", CheckpointSupport{}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Err()
			if (err != nil) != tt.wantErr || (err != nil && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tt.reason))) {
				t.Fatalf("Err = %v, want error %v with %q", err, tt.wantErr, tt.reason)
			}
		})
	}
}

// TestTargetsOf: a checkpoint records each folder's target and mode, never
// its host source, and a record of other sources still matches.
func TestTargetsOf(t *testing.T) {
	ms := []Mount{{Source: "/data/a/ws", Target: "/home/agent/workspace"}, {Source: "/data/a/up", Target: "/mnt/user-data/uploads", ReadOnly: true}}
	got := TargetsOf(ms)
	want := []Mount{{Target: "/home/agent/workspace"}, {Target: "/mnt/user-data/uploads", ReadOnly: true}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("TargetsOf = %+v, want %+v", got, want)
	}
	other := []Mount{{Source: "/elsewhere/ws", Target: "/home/agent/workspace"}, {Source: "/elsewhere/up", Target: "/mnt/user-data/uploads", ReadOnly: true}}
	if !SameTargets(got, TargetsOf(other)) {
		t.Error("the same targets from other sources do not match")
	}
}
