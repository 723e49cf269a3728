package docker

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/container"
)

// StartBare creates and starts a container of the backend's image and
// runtime that is no sandbox: `sleep infinity`, no network, no folders, no
// agent and no attach, with the instance's labels so that RemoveInstance
// removes it. It is the floor a benchmark compares a sandbox's boot with:
// the Engine API's create and start and nothing of threadbox's.
func (b *Backend) StartBare(ctx context.Context, name string) error {
	created, err := b.cli.ContainerCreate(ctx, &container.Config{
		Image:      b.cfg.Image,
		Entrypoint: []string{"sleep", "infinity"},
		Labels:     map[string]string{LabelManaged: "true", LabelInstance: b.cfg.Instance},
	}, &container.HostConfig{
		NetworkMode:    "none",
		Runtime:        b.cfg.Runtime,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		LogConfig:      container.LogConfig{Type: "none"},
	}, nil, nil, "threadbox-"+b.cfg.Instance+"-"+name)
	if err != nil {
		return fmt.Errorf("docker: create: %w", err)
	}
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("docker: start: %w", err)
	}
	return nil
}
