package main

import (
	"log/slog"
	"path/filepath"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/unsupported"
)

// newBackends builds the configured sandbox backends, in the order of
// SANDBOX_BACKEND. A backend that cannot even be built is left out with a
// logged reason; one that is built but unavailable stays in the list, so the
// container manager falls back past it and the capability matrix shows why.
func newBackends(cfg Config, layout *hostdirs.Layout, log *slog.Logger) ([]sandbox.Backend, []func() error) {
	var (
		out     []sandbox.Backend
		closers []func() error
	)
	limits := sandbox.Limits{MemoryBytes: cfg.SandboxMemory, CPUs: cfg.SandboxCPUs, Pids: cfg.SandboxPids, DiskBytes: cfg.SandboxDisk}
	quota := quotaMode(cfg) == hostdirs.QuotaLoop
	for _, name := range cfg.SandboxBackend {
		switch name {
		case "docker":
			b, err := docker.New(docker.Config{Image: cfg.SandboxImage, Runtime: cfg.SandboxRuntime, AgentBin: agentBin(cfg), SocketDir: filepath.Join(cfg.DataDir, "run"), Limits: limits, DiskQuota: quota, Logger: log.With("backend", "docker"), Instance: cfg.Instance})
			if err != nil {
				log.Warn("sandbox backend left out", "backend", name, "reason", err.Error())
				continue
			}
			closers = append(closers, b.Close)
			out = append(out, b)
		case "local":
			b, err := local.New(local.Config{RootFS: cfg.RootFS, AgentBin: agentBin(cfg), DiskQuota: quota, Limits: limits, Instance: cfg.Instance, Logger: log})
			if err != nil {
				log.Warn("sandbox backend left out", "backend", name, "reason", err.Error())
				continue
			}
			closers = append(closers, b.Close)
			out = append(out, b)
		default:
			b, err := unsupported.New(name)
			if err != nil {
				log.Warn("sandbox backend left out", "backend", name, "reason", err.Error())
				continue
			}
			out = append(out, b)
		}
	}
	return out, closers
}
