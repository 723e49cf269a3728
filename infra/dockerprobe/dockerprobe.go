// Package dockerprobe describes a Docker sandbox backend for the capability
// matrix (app/backends): it wraps the backend and asks the daemon's
// `docker info` which limits its cgroups enforce, and names the isolation of
// the configured OCI runtime. It lives beside infra/docker so that package
// stays as it is.
package dockerprobe

import (
	"context"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"

	"threadbox/domain/sandbox"
)

// Info is the part of the Engine API client the probe uses.
type Info interface {
	Info(ctx context.Context) (system.Info, error)
}

// Backend is a Docker sandbox backend that describes itself. Every
// sandbox.Backend call goes to the wrapped backend.
type Backend struct {
	sandbox.Backend
	info      Info
	runtime   string
	diskQuota bool
}

// New wraps be, a Docker backend using runtime, with a probe talking to the
// daemon named by the environment (DOCKER_HOST, ...). diskQuota tells that
// its host folders carry a disk quota.
func New(be sandbox.Backend, runtime string, diskQuota bool) (*Backend, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("dockerprobe: client: %w", err)
	}
	return NewWithInfo(be, cli, runtime, diskQuota), nil
}

// NewWithInfo wraps be with a probe over an existing Info source.
func NewWithInfo(be sandbox.Backend, info Info, runtime string, diskQuota bool) *Backend {
	if runtime == "" {
		runtime = "runc"
	}
	return &Backend{Backend: be, info: info, runtime: runtime, diskQuota: diskQuota}
}

// Isolation names the isolation level of the configured runtime.
func (b *Backend) Isolation() string {
	switch {
	case b.runtime == "runsc" || strings.HasPrefix(b.runtime, "runsc-"):
		return "application kernel"
	case strings.HasPrefix(b.runtime, "kata"):
		return "microVM"
	default:
		return "namespaces"
	}
}

// EnforcedLimits asks the daemon which cgroup limits it supports. It
// returns nil when the daemon does not answer.
func (b *Backend) EnforcedLimits(ctx context.Context) ([]string, string) {
	in, err := b.info.Info(ctx)
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
	if b.diskQuota {
		out = append(out, "disk")
	}
	mech := "cgroup"
	if in.CgroupVersion != "" {
		mech += " v" + in.CgroupVersion
	}
	if b.Isolation() == "application kernel" {
		mech += " (gVisor)"
	}
	return out, mech
}
