package docker

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"threadbox/domain/sandbox"
)

// criuProbe remembers what `criu check` said on this host: the answer does
// not change while the process runs (a new CRIU or kernel needs a restart).
type criuProbe struct {
	bin  string // the criu binary; "" looks it up in PATH
	once sync.Once
	err  error // nil when CRIU works here
}

// check runs `criu check` once (CRIU needs root) and returns why CRIU
// cannot checkpoint on this host, or nil.
func (p *criuProbe) check(ctx context.Context) error {
	p.once.Do(func() {
		bin := p.bin
		if bin == "" {
			bin = "criu"
		}
		bin, err := exec.LookPath(bin)
		if err != nil {
			p.err = fmt.Errorf("CRIU is not installed on this host")
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		var out bytes.Buffer
		cmd := exec.CommandContext(cctx, bin, "check")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			p.err = fmt.Errorf("`criu check` fails on this host (%s): %s", criuVersion(bin), firstLine(out.String(), err))
		}
	})
	return p.err
}

// criuVersion returns CRIU's version line ("Version: 3.17.1"), or "criu".
func criuVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "criu"
	}
	return "CRIU " + strings.TrimSpace(strings.TrimPrefix(firstLine(string(out), nil), "Version:"))
}

// firstLine returns the first non-empty line of s, or err's text.
func firstLine(s string, err error) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// Checkpoints answers for the configured runtime. Sandboxes under Docker
// keep files only: under runc the checkpoint would be CRIU's, which the
// Docker Engine drives only in its experimental mode, and CRIU is checked
// on this host to say why it cannot serve here; under runsc the gvisor
// backend drives gVisor's own checkpoints (the Engine's path is slower and
// unreliable).
func (b *Backend) Checkpoints(ctx context.Context) sandbox.CheckpointSupport {
	if isolation(b.cfg.Runtime) == "application kernel" {
		return sandbox.FilesOnly("files only: gVisor checkpoints through the Docker Engine are experimental, take about 2 s each way and fail now and then; the gvisor backend (SANDBOX_BACKEND=gvisor) checkpoints gVisor sandboxes by driving runsc itself")
	}
	if err := b.criu.check(ctx); err != nil {
		return sandbox.FilesOnly("files only: a runc sandbox is checkpointed by CRIU, and " + err.Error())
	}
	return sandbox.FilesOnly("files only: CRIU works on this host, but threadbox does not checkpoint runc sandboxes through the Docker Engine (its checkpoints need the daemon's experimental mode)")
}

// Checkpoint is unsupported: Checkpoints says why.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("docker: %w", b.Checkpoints(ctx).Err())
}

// CheckpointRunning is unsupported: Checkpoints says why.
func (b *Backend) CheckpointRunning(ctx context.Context, id, dir string) error {
	return fmt.Errorf("docker: %w", b.Checkpoints(ctx).Err())
}

// Restore is unsupported: Checkpoints says why.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("docker: %w", b.Checkpoints(ctx).Err())
}
