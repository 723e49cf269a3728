package docker

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/system"
)

type fakeInfo struct {
	info system.Info
	err  error
}

func (f fakeInfo) Info(context.Context) (system.Info, error) { return f.info, f.err }

func TestDescribe(t *testing.T) {
	full := system.Info{MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true, CgroupVersion: "1"}
	tests := []struct {
		name      string
		runtime   string
		info      fakeInfo
		quota     bool
		isolation string
		limits    []string
		mech      string
	}{
		{"runc", "runc", fakeInfo{info: full}, true, "namespaces", []string{"memory", "cpu", "pids", "nofile", "tmp", "disk"}, "cgroup v1"},
		{"runsc", "runsc", fakeInfo{info: full}, false, "application kernel", []string{"memory", "cpu", "pids", "nofile", "tmp"}, "cgroup v1 (gVisor)"},
		{"kata", "kata-qemu", fakeInfo{info: full}, false, "microVM", []string{"memory", "cpu", "pids", "nofile", "tmp"}, "cgroup v1"},
		{"no pids controller", "runc", fakeInfo{info: system.Info{MemoryLimit: true, CgroupVersion: "2"}}, false, "namespaces", []string{"memory", "nofile", "tmp"}, "cgroup v2"},
		{"daemon down", "runc", fakeInfo{err: errors.New("down")}, true, "namespaces", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isolation(tt.runtime); got != tt.isolation {
				t.Errorf("isolation %q, want %q", got, tt.isolation)
			}
			l, m := enforcedLimits(context.Background(), tt.info, tt.runtime, tt.quota)
			if !slices.Equal(l, tt.limits) || m != tt.mech {
				t.Errorf("limits %q %q, want %q %q", l, m, tt.limits, tt.mech)
			}
		})
	}
}
