package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
)

// Warm boots a warm pool sandbox named spec.ID (boxes.Pool) over an empty
// view: every folder of spec must lie under /home/agent or /mnt, where a
// claim's binds reach the running sandbox. ErrUnsupported without root.
func (b *Backend) Warm(ctx context.Context, spec sandbox.Spec) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("gvisor: warm pool: %w: binding folders into a running sandbox needs root", sandbox.ErrUnsupported)
	}
	for _, m := range spec.Mounts {
		if place("/", m.Target) == "" {
			return fmt.Errorf("gvisor: warm pool: %w: folder %s is not under /home/agent or /mnt", sandbox.ErrUnsupported, m.Target)
		}
	}
	return b.pool.Warm(ctx, spec, func(ctx context.Context, s sandbox.Spec) (*box, error) {
		return b.start(ctx, s, "", b.pool.Slot(spec.ID).Dir)
	})
}

// Claim makes the warm sandbox name spec.ID's (boxes.Pool): the
// container's folders are bound into its view, whence gVisor's file server
// serves them.
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	return b.pool.Claim(ctx, name, spec, b.cfg.Dirs, b.cfg.Limits, func(bx *box, _ boxes.Slot) error {
		bx.id = spec.ID
		return nil
	})
}

// WarmSandboxes lists this process's unclaimed warm sandboxes: sandboxes
// end with the process that booted them, so there are no others.
func (b *Backend) WarmSandboxes(context.Context) ([]string, error) {
	return b.pool.Unclaimed(), nil
}

// removeView unmounts and deletes the view dir.
func (b *Backend) removeView(dir string) {
	if err := (viewLayout{}).Remove(dir); err != nil {
		b.log.Warn("sandbox view not removed", "view", dir, "cause", err.Error())
	}
}

// removeStrayViews removes the views that serve no sandbox: neither one
// this backend runs, boots or keeps warm, nor one of keep (runsc
// containers left running, by container id and id served). Their
// sandboxes ended with an earlier process.
func (b *Backend) removeStrayViews(keep map[string]bool) {
	entries, err := os.ReadDir(b.views)
	if err != nil {
		return
	}
	b.cidsMu.Lock()
	for cid := range b.cids {
		keep["run-"+cid] = true
	}
	b.cidsMu.Unlock()
	for _, dir := range b.pool.Dirs() {
		keep[filepath.Base(dir)] = true
	}
	for _, e := range entries {
		if e.IsDir() && !keep[e.Name()] {
			b.removeView(filepath.Join(b.views, e.Name()))
		}
	}
}

// keepView marks the views of the runsc container cid, serving id, kept.
func keepView(keep map[string]bool, cid, id string) {
	keep["run-"+cid] = true
	if id != "" {
		keep[hostdirs.SafeID(id)] = true
	}
}
