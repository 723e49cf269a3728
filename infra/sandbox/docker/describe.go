package docker

import (
	"context"
	"strings"

	"github.com/docker/docker/api/types/system"
)

// Info is the part of the Engine API client that Describe asks.
type Info interface {
	Info(ctx context.Context) (system.Info, error)
}

// Isolation names the isolation level of the configured runtime.
func (b *Backend) Isolation() string { return isolation(b.cfg.Runtime) }

func isolation(runtime string) string {
	switch {
	case runtime == "runsc" || strings.HasPrefix(runtime, "runsc-"):
		return "application kernel"
	case strings.HasPrefix(runtime, "kata"):
		return "microVM"
	default:
		return "namespaces"
	}
}

// EnforcedLimits asks the daemon which cgroup limits it supports. It
// returns nil when the daemon does not answer.
func (b *Backend) EnforcedLimits(ctx context.Context) ([]string, string) {
	return enforcedLimits(ctx, b.info, b.cfg.Runtime, b.cfg.DiskQuota)
}

func enforcedLimits(ctx context.Context, info Info, runtime string, diskQuota bool) ([]string, string) {
	in, err := info.Info(ctx)
	if err != nil {
		return nil, ""
	}
	var out []string
	if in.MemoryLimit {
		out = append(out, "memory")
	}
	if in.CPUCfsQuota {
		out = append(out, "cpu")
	}
	if in.PidsLimit {
		out = append(out, "pids")
	}
	// The nofile ulimit and the /tmp tmpfs size are set on every container.
	out = append(out, "nofile", "tmp")
	if diskQuota {
		out = append(out, "disk")
	}
	mech := "cgroup"
	if in.CgroupVersion != "" {
		mech += " v" + in.CgroupVersion
	}
	if isolation(runtime) == "application kernel" {
		mech += " (gVisor)"
	}
	return out, mech
}
