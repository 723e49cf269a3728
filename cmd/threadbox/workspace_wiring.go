package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"threadbox/app/workspace"
	"threadbox/domain/skill"
	"threadbox/infra/blob"
	"threadbox/infra/fsroot"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/skillfs"
)

// skillFiles adapts infra/skillfs to the workspace's port.
type skillFiles struct{ s *skillfs.Store }

func (f skillFiles) Save(ctx context.Context, orgID, name string, version int, files []skill.File) error {
	return f.s.Save(ctx, orgID, name, version, files)
}

func (f skillFiles) Delete(ctx context.Context, orgID, name string) error {
	return f.s.Delete(ctx, orgID, name)
}

func (f skillFiles) Sync(ctx context.Context, containerID string, loads []workspace.SkillLoad) error {
	out := make([]skillfs.Load, len(loads))
	for i, l := range loads {
		out[i] = skillfs.Load{OrgID: l.OrgID, Name: l.Name, Version: l.Version}
	}
	return f.s.Sync(ctx, containerID, out)
}

// newWorkspace wires the Workspace API (CONTRACT §7): the chat pipeline
// over the Messages tool loop, thread files over the Files API use cases,
// the artifact store and the skill store under DATA_DIR.
func newWorkspace(cfg Config, sys *system, layout *hostdirs.Layout, fs *fsroot.Containers, log *slog.Logger) *workspace.Service {
	model := cfg.ModelName
	if model == "" {
		model = "default"
	}
	// The chat pipeline shares the Messages API's tool loop: one model
	// client (one connection pool), the same tools and iteration limit.
	return workspace.New(sys.store, workspace.Deps{
		Engine:           sys.messages,
		Containers:       sys.containers,
		Files:            sys.files,
		Container:        fs,
		Blobs:            blob.New(filepath.Join(cfg.DataDir, "artifacts")),
		Skills:           skillFiles{skillfs.New(filepath.Join(cfg.DataDir, "skills"), func(id string) string { return layout.Dirs(id).Skills })},
		Policies:         sys.admin,
		DefaultModel:     model,
		MaxArtifactBytes: cfg.MaxArtifactBytes,
		SandboxEnv:       sys.sandbox.env,
		Leases:           sys.leases,
		Quota:            sys.quota,
		Audit:            sys.store,
		Log:              log.With("component", "workspace"),
	})
}
