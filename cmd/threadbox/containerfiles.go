package main

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"threadbox/app/files"
	"threadbox/app/skills"
	"threadbox/app/tools"
	"threadbox/app/workspace"
	"threadbox/infra/fsroot"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/skillfs"
)

// containerFiles is the access to containers' files that the Files API,
// the workspace and the code tools share (the ports of app/files and
// app/tools): infra/fsroot over threadbox's own folders, or, for the
// kubernetes backend in storage-class mode, infra/sandbox/kubernetes.Files
// through the pods (docs/backends.md).
type containerFiles interface {
	files.Store
	tools.Files
	workspace.ContainerFiles
}

var (
	_ containerFiles           = (*fsroot.Containers)(nil)
	_ containerFiles           = (*kubernetes.Files)(nil)
	_ workspace.ContainerFiles = (*fsroot.Containers)(nil)
	_ workspace.ContainerFiles = (*kubernetes.Files)(nil)
)

// podFiles returns the file access through the pods when the first
// sandbox backend is kubernetes without host path volumes (its claims
// are out of threadbox's reach), else nil. Containers booted on a later
// backend of SANDBOX_BACKEND would not be served by it, so the pods'
// access is used only when kubernetes comes first.
func podFiles(cfg Config, sys *system) *kubernetes.Files {
	if len(sys.backends) == 0 || cfg.Kubernetes.HostPathVolumes {
		return nil
	}
	kb, ok := sys.backends[0].(*kubernetes.Backend)
	if !ok {
		return nil
	}
	return kubernetes.NewFiles(kb, sys.containers)
}

// newSkillFiles returns the skills' file store: infra/skillfs, whose
// container folders are the sandboxes' own, or, with pods, skillfs's
// folders mirrored into each pod's claim after every change.
func newSkillFiles(s *skillfs.Store, pods *kubernetes.Files, layout *hostdirs.Layout) skills.Files {
	if pods == nil {
		return skillFiles{s}
	}
	return podSkillFiles{skillFiles: skillFiles{s}, pods: pods, dir: func(id string) string { return layout.Dirs(id).Skills }}
}

// podSkillFiles keeps skillfs's copy of a container's skills on
// threadbox's disk and sends it to the pod's claim.
type podSkillFiles struct {
	skillFiles
	pods *kubernetes.Files
	dir  func(containerID string) string
}

// Sync makes skillfs's copy hold exactly loads, then the pod's skills
// folder hold that copy. A request without skills for a container that
// had none boots no pod.
func (f podSkillFiles) Sync(ctx context.Context, containerID string, loads []skills.Load) error {
	dir := f.dir(containerID)
	before, err := os.ReadDir(dir)
	if len(loads) == 0 && (errors.Is(err, fs.ErrNotExist) || err == nil && len(before) == 0) {
		return nil
	}
	if err := f.skillFiles.s.Sync(ctx, containerID, skillLoads(loads)); err != nil {
		return err
	}
	return f.pods.SyncSkills(ctx, containerID, dir, -1)
}
