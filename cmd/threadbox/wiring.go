package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"threadbox/app/batches"
	"time"

	"threadbox/app/admin"
	"threadbox/app/auth"
	"threadbox/app/containers"
	"threadbox/app/egressgate"
	"threadbox/app/files"
	"threadbox/app/lease"
	"threadbox/app/mcpserver"
	"threadbox/app/messages"
	"threadbox/app/quota"
	"threadbox/app/skills"
	"threadbox/app/tools"
	"threadbox/app/turns"
	metering "threadbox/app/usage"
	"threadbox/app/workspace"
	"threadbox/domain/sandbox"
	"threadbox/infra/fsroot"
	"threadbox/infra/metrics"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/skillfs"
	"threadbox/infra/store"
)

// system is every wired part of a running server.
type system struct {
	store      *store.Store
	auth       *auth.Service
	admin      *admin.Service
	quota      *quota.Service // the org policy's quotas
	workspace  *workspace.Service
	containers *containers.Service
	leases     *lease.Keeper // this process's database leases
	metrics    *metrics.Registry
	files      *files.Service
	messages   *messages.Service     // the tool loop
	kit        messages.ToolExecutor // the tool kit the loop runs server tools with (and the MCP server serves)
	terminals  *tools.Executor       // the same kit unwrapped: its exec_command sessions, for the thread's terminal view
	mcp        *mcpserver.Service    // the MCP server at /mcp
	turns      *turns.Service        // prepares every turn (Messages API and chat) and keeps the detached turns' logs
	skills     *skills.Service
	batches    *batches.Service  // runs Message Batches in the background
	sandbox    *sandboxWiring    // the sandbox_v1 tools and the API bridge
	egress     *egressWiring     // the egress proxy and its ledger writer; nil when EGRESS_PROXY=off
	usage      *metering.Service // usage metering: commands, sandbox time and model tokens per org, user, container, thread and day
	backends   []sandbox.Backend
	blobs      artifactStore // DATA_DIR/artifacts or BLOB_URL
	closers    []func() error
}

// retainer keeps a container's outputs through the Files use cases
// (containers.Retainer). The owner and those use cases need each other:
// expiry keeps outputs through the files, and the files (a pod's, read by
// running commands in it) reach containers through the owner. The owner is
// built first with this retainer, which finds the files in the system when
// it is asked, after the wiring has built them; nothing asks before the
// system serves.
type retainer struct{ sys *system }

func (r retainer) Retain(ctx context.Context, containerID, orgID, ownerID string) ([]string, error) {
	return r.sys.files.Retain(ctx, containerID, orgID, ownerID)
}

func (r retainer) Forget(ctx context.Context, containerID string) error {
	return r.sys.files.Forget(ctx, containerID)
}

// Close releases what the system holds.
func (s *system) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
}

// agentBin finds the static in-sandbox agent: the setting, else next to
// this binary, else bin/threadbox-agent of a checkout.
func agentBin(cfg Config) string {
	if cfg.AgentBin != "" {
		return cfg.AgentBin
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "threadbox-agent")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join("bin", "threadbox-agent")
}

// quotaMode picks loop-mounted disk quotas when this process can make them.
func quotaMode(cfg Config) hostdirs.QuotaMode {
	switch cfg.SandboxQuota {
	case "loop":
		return hostdirs.QuotaLoop
	case "none":
		return hostdirs.QuotaNone
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("mkfs.ext4"); err == nil {
			return hostdirs.QuotaLoop
		}
	}
	return hostdirs.QuotaNone
}

// folders adapts hostdirs to the container manager's port.
type folders struct{ l *hostdirs.Layout }

func (f folders) Prepare(ctx context.Context, id string) ([]sandbox.Mount, error) {
	d, err := f.l.Prepare(ctx, id)
	if err != nil {
		return nil, err
	}
	return d.Mounts(), nil
}

func (f folders) Remove(ctx context.Context, id string) error { return f.l.Remove(ctx, id) }

func (f folders) Repair(ctx context.Context, id string) error { return f.l.Repair(ctx, id) }

func (f folders) Release(ctx context.Context, idle time.Duration, busy func(string) bool) ([]string, error) {
	return f.l.ReleaseUnused(ctx, idle, busy)
}

// wire builds the system from the configuration.
func wire(ctx context.Context, cfg Config, log *slog.Logger) (*system, error) {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	sys := &system{store: st, closers: []func() error{st.Close}, metrics: metrics.New()}
	// This process's leases go back after the backends have closed their
	// agent connections (closers run in reverse): a process that adopts
	// the sandboxes at once finds their agents free.
	sys.leases = lease.New(st.Leases(), cfg.Instance, cfg.LeaseTTL)
	sys.closers = append(sys.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return sys.leases.ReleaseAll(ctx)
	})
	if sys.auth, err = newAuth(cfg, st); err != nil {
		sys.Close()
		return nil, err
	}
	egressIn, err := newEgressInstall(cfg, log)
	if err != nil {
		sys.Close()
		return nil, err
	}
	sys.admin = admin.New(admin.Deps{Store: st.Accounts(), Tokens: sys.auth, Hash: sys.auth.HashPassword, EmailDomains: cfg.OrgEmailDomains, QuotaBounds: cfg.QuotaBounds,
		EgressLedger: st.Egress(), EgressSecrets: st.Egress(), Sealer: egressIn.box})
	if sys.blobs, err = newBlobs(ctx, cfg); err != nil {
		sys.Close()
		return nil, err
	}

	layout := hostdirs.New(cfg.DataDir, hostdirs.Options{Quota: quotaMode(cfg), DiskBytes: cfg.SandboxDisk})
	var closers []func() error
	sys.backends, closers = newBackends(cfg, layout, log)
	sys.closers = append(sys.closers, closers...)
	names := make([]string, len(sys.backends))
	for i, b := range sys.backends {
		names[i] = b.Name()
	}
	sys.quota = quota.New(st.Quota(), st.Containers(), layout, sys.admin)
	sys.usage = metering.New(metering.Deps{
		Store: st.Usage(), Containers: st.Containers(),
		// Usage is summed in memory and written once a second, not per
		// request.
		Buffer: time.Second,
		// Each command is recorded while it runs, so that one whose server
		// dies is metered by a sweep of another (or the next) server once
		// its server is not seen for a lease's time to live.
		Runs: st.Usage(), Holder: sys.leases.Holder(), Settle: cfg.SweepInterval, Stale: cfg.LeaseTTL,
		Log: log.With("component", "usage"),
	})
	sys.egress = newEgress(cfg.Egress, egressIn, egressgate.NewGate(st.Containers(), sys.admin, 0).WithSecrets(sys.admin), st.Egress(), sys.metrics, log)
	sys.closers = append(sys.closers, sys.egress.Close)
	sys.sandbox = newSandboxWiring(cfg, sys.auth, sys.egress, log)
	sys.containers = containers.New(containers.Deps{
		Store: st.Containers(), Backends: sys.backends, Folders: folders{layout}, Leases: sys.leases,
		Threads: st.Threads(), Quota: sys.quota, Handoff: st.Leases(),
		// Output files outlive their container's maximum age (docs/files.md).
		Retainer: retainer{sys},
		// Sandboxes of backends that checkpoint keep their life across the
		// idle stop, a hand-over and a graceful shutdown (docs/lifecycle.md);
		// the checkpoints live in the blob store, where every server finds
		// them.
		Checkpoints: checkpointStore(cfg, layout, st, sys.blobs, log.With("component", "checkpoints")),
		OnBoot:      []containers.BootHook{sys.sandbox.bootHook},
		OnStart:     []func(bool){sys.metrics.SandboxStarted},
		OnSweep:     []func(containers.SweepReport){sys.metrics.Swept},
		Meters:      []containers.Meter{sys.usage.Sandbox},
		Config: containers.Config{
			Idle: cfg.SandboxIdle, MaxAge: cfg.ContainerMax, CheckpointMaxAge: cfg.CheckpointMax, Sweep: cfg.SweepInterval,
			Limits:   sandbox.Limits{MemoryBytes: cfg.SandboxMemory, CPUs: cfg.SandboxCPUs, Pids: cfg.SandboxPids, DiskBytes: cfg.SandboxDisk},
			WarmPool: cfg.WarmPool, WarmMemory: cfg.WarmMemory,
		},
		Log: log.With("component", "containers"),
	})
	sys.metrics.WatchSandboxes(sys.containers, names)

	var owner *fsroot.Owner
	if os.Geteuid() == 0 {
		owner = &fsroot.Owner{UID: hostdirs.SandboxUID, GID: hostdirs.SandboxGID}
	}
	var fs containerFiles = fsroot.NewContainers(func(id string) fsroot.Dirs {
		d := layout.Dirs(id)
		return fsroot.Dirs{Workspace: d.Workspace, Uploads: d.Uploads, Outputs: d.Outputs, Skills: d.Skills}
	}, fsroot.Options{Owner: owner, SharedDisk: quotaMode(cfg) == hostdirs.QuotaNone})
	pods := podFiles(cfg, sys)
	if pods != nil {
		fs = pods
	}
	sys.files = files.New(files.Deps{Store: fs, Containers: sys.containers, Policies: sys.admin, Idempotency: st.UploadKeys(0), Quota: sys.quota,
		Records: st.Files(), Blobs: retainedBlobs(cfg, sys.blobs), MaxRetainedBytes: cfg.MaxArtifactBytes})
	sys.messages = newMessages(cfg, sys, fs, log)
	sys.skills = skills.New(skills.Deps{
		Store:    st.Skills(),
		Files:    newSkillFiles(skillfs.New(filepath.Join(cfg.DataDir, "skills"), func(id string) string { return layout.Dirs(id).Skills }), pods, layout),
		Locks:    st.Locks(),
		Archives: newSkillArchives(cfg, sys.blobs),
		Audit:    st.Accounts(),
		Quota:    sys.quota,
	})
	sys.turns = newTurns(cfg, sys, log)
	// Message Batches run through the same front door as live requests,
	// claimed by any server of the database (docs/batches.md).
	sys.batches = batches.New(st.Batches(), sys.turns, batches.Config{
		Holder: sys.leases.Holder(), Lease: cfg.LeaseTTL, Workers: cfg.BatchWorkers, PerOrg: cfg.BatchPerOrg, Users: st.Accounts(),
	}, log.With("component", "batches"))
	// Files snapshots are kept on the host, where the containers' folders
	// are. The pods' claims in storage-class mode are not: they are
	// mirrored into DATA_DIR/claim-snapshots around each snapshot. A
	// turn's snapshot keeps the running state too where the sandbox's
	// backend checkpoints.
	snaps := workspace.Snapshots{Records: st.Snapshots(), Files: layout, State: sys.containers}
	if pods != nil {
		snaps.Files = kubernetes.NewSnapshots(hostdirs.New(filepath.Join(cfg.DataDir, "claim-snapshots"), hostdirs.Options{}), pods)
	}
	sys.workspace = newWorkspace(cfg, sys, fs, snaps, log)
	sys.mcp = newMCP(sys, log)
	return sys, nil
}
