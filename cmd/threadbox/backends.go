package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"threadbox/app/backends"
	"threadbox/app/containers"
	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/gvisor"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/microvm"
	"threadbox/infra/sandbox/unsupported"
)

// newBackends builds the configured sandbox backends, in the order of
// SANDBOX_BACKEND. Every configured backend stays in the list: one that
// cannot even be set up is an unsupported.Broken stand-in, and one whose
// prerequisites are missing answers Available with the reason, so the
// container manager falls back past it and the capability matrix, the
// readiness probe and the start-up log (checkBackends) say why.
func newBackends(cfg Config, layout *hostdirs.Layout, log *slog.Logger) ([]sandbox.Backend, []func() error) {
	var (
		out     []sandbox.Backend
		closers []func() error
	)
	limits := sandbox.Limits{MemoryBytes: cfg.SandboxMemory, CPUs: cfg.SandboxCPUs, Pids: cfg.SandboxPids, DiskBytes: cfg.SandboxDisk}
	quota := quotaMode(cfg) == hostdirs.QuotaLoop
	for _, name := range cfg.SandboxBackend {
		b, err := newBackend(name, cfg, limits, quota, log)
		if err != nil {
			out = append(out, unsupported.Broken(name, err))
			continue
		}
		if c, ok := b.(io.Closer); ok {
			closers = append(closers, c.Close)
		}
		out = append(out, b)
	}
	return out, closers
}

// newBackend sets up the backend name: with limits as its default limits
// and quota saying that the host folders carry a disk quota.
func newBackend(name string, cfg Config, limits sandbox.Limits, quota bool, log *slog.Logger) (sandbox.Backend, error) {
	log = log.With("backend", name)
	switch name {
	case "docker":
		return docker.New(docker.Config{Settings: boxes.Settings{Limits: limits, Logger: log, Instance: cfg.Instance, TrustDir: egressTrustDir(cfg)}, Image: cfg.SandboxImage, Runtime: cfg.SandboxRuntime, AgentBin: agentBin(cfg), SocketDir: filepath.Join(cfg.DataDir, "run"), PoolDir: filepath.Join(cfg.DataDir, "pool"), DiskQuota: quota})
	case "local":
		return local.New(local.Config{Settings: boxes.Settings{Limits: limits, Instance: cfg.Instance, Logger: log, TrustDir: egressTrustDir(cfg)}, RootFS: cfg.RootFS, AgentBin: agentBin(cfg), DiskQuota: quota, PoolDir: filepath.Join(cfg.DataDir, "pool-local")})
	case "gvisor":
		return gvisor.New(gvisor.Config{Settings: boxes.Settings{Limits: limits, Instance: cfg.Instance, Logger: log, TrustDir: egressTrustDir(cfg)}, RootFS: cfg.RootFS, AgentBin: agentBin(cfg), DiskQuota: quota})
	case "kubernetes":
		return newKubernetes(cfg, limits, log)
	case "microvm", "firecracker":
		// firecracker is the microvm backend with the Firecracker VMM.
		vmm := microvm.VMMQEMU
		if name == "firecracker" {
			vmm = microvm.VMMFirecracker
		}
		return microvm.New(microvm.Config{
			Settings: boxes.Settings{Limits: limits, Instance: cfg.Instance, Logger: log, TrustDir: egressTrustDir(cfg)}, Name: name, VMM: vmm, QEMU: cfg.MicroVM.QEMU, Accel: cfg.MicroVM.Accel, Kernel: cfg.MicroVM.Kernel,
			Guest: cfg.MicroVM.Guest, RootFS: cfg.RootFS, AgentBin: agentBin(cfg), DiskQuota: quota, NoTemplate: cfg.MicroVM.Template == "off", RootImage: cfg.MicroVM.RootImage})
	}
	return unsupported.New(name)
}

// MicroVMConfig configures the microvm backend (and firecracker, the same
// backend with the Firecracker VMM).
type MicroVMConfig struct {
	Accel string // MICROVM_ACCEL: "" (KVM where it can run the guest kernel), kvm or tcg (emulation)
	// Template is MICROVM_TEMPLATE: on (the default) restores warm VMs
	// from a template snapshot, off boots each.
	Template string
	Kernel   string // MICROVM_KERNEL: the operator's guest kernel, such as one built for PVM
	QEMU     string // MICROVM_QEMU: the QEMU binary; default the guest artefacts' QEMU, else qemu-system-x86_64 in PATH
	Guest    string // MICROVM_GUEST, else the cache's microvm-guest/current
	// RootImage is MICROVM_ROOT_IMAGE: the erofs image of the root
	// filesystem warm VMs mount (made when missing); default beside the
	// root filesystem's folder; off shares the root over 9p.
	RootImage string
}

// availableDeadline bounds each backend's availability check at start.
const availableDeadline = 10 * time.Second

// checkBackends runs once at start. With no backend configured it logs one
// warning line saying code execution is off. It logs each configured backend's
// warning (the local development jail's) as one warning line, and each
// unavailable backend once, as an error line with the reason; it returns
// the backends that can serve now, in configured order.
func checkBackends(ctx context.Context, bs []sandbox.Backend, log *slog.Logger) []sandbox.Backend {
	if len(bs) == 0 {
		log.Warn("code execution is off: no sandbox backend is configured (SANDBOX_BACKEND lists none), so every code tool answers \"code_execution provider is not configured.\"; the orgs' policies are unchanged")
		return nil
	}
	var ok []sandbox.Backend
	for _, b := range bs {
		if w, isWarner := b.(backends.Warner); isWarner && w.Warning() != "" {
			log.Warn("sandbox backend "+b.Name()+": "+w.Warning(), "backend", b.Name())
		}
		actx, cancel := context.WithTimeout(ctx, availableDeadline)
		err := b.Available(actx)
		cancel()
		if err != nil {
			log.Error("sandbox backend unavailable", "backend", b.Name(), "reason", err.Error())
			continue
		}
		ok = append(ok, b)
	}
	return ok
}

// warmPool adapts the owner's warm pool to the capability matrix.
func warmPool(c *containers.Service) func(string) backends.WarmPool {
	return func(name string) backends.WarmPool {
		st := c.WarmPool(name)
		return backends.WarmPool{Size: st.Size, Ready: st.Ready, Note: st.Note}
	}
}
