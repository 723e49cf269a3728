package docker

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// EngineExec runs args in the running sandbox of id through the Engine
// API's exec endpoints, bypassing the agent, discards its output and returns
// its exit code. It is the baseline the benchmark (cmd/threadbox-bench)
// compares the agent's round trip with; threadbox itself never uses it.
func (b *Backend) EngineExec(ctx context.Context, id string, args ...string) (int, error) {
	name := b.ContainerName(id)
	ex, err := b.cli.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: args, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, fmt.Errorf("docker: exec create: %w", err)
	}
	hj, err := b.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, fmt.Errorf("docker: exec attach: %w", err)
	}
	_, err = stdcopy.StdCopy(io.Discard, io.Discard, hj.Reader)
	hj.Close()
	if err != nil {
		return 0, fmt.Errorf("docker: exec output: %w", err)
	}
	in, err := b.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return 0, fmt.Errorf("docker: exec inspect: %w", err)
	}
	return in.ExitCode, nil
}

// Instances lists the instances (THREADBOX_INSTANCE) that have threadbox
// sandboxes, running or not, on the daemon the environment names, sorted.
func Instances(ctx context.Context) ([]string, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: client: %w", err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true"))})
	if err != nil {
		return nil, fmt.Errorf("docker: list: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range list {
		if inst := c.Labels[LabelInstance]; inst != "" && !seen[inst] {
			seen[inst] = true
			out = append(out, inst)
		}
	}
	sort.Strings(out)
	return out, nil
}

// CountInstance counts the containers of instance, running or not, on the
// daemon the environment names.
func CountInstance(ctx context.Context, instance string) (int, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, fmt.Errorf("docker: client: %w", err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+instance))})
	if err != nil {
		return 0, fmt.Errorf("docker: list %s: %w", instance, err)
	}
	return len(list), nil
}
