package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
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
	return b.pool.Warm(ctx, spec, b.Stop, func(ctx context.Context, s sandbox.Spec) (*box, error) {
		return b.start(ctx, s, "", b.pool.Slot(spec.ID).Dir, false)
	})
}

// Claim makes the warm sandbox name spec.ID's (boxes.Pool): the
// container's folders are bound into its view, whence gVisor's file server
// serves them.
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	return b.pool.Claim(ctx, name, spec, b.cfg.Dirs, b.cfg.Limits, func(bx *box, _ boxes.Slot) error {
		bx.id = spec.ID
		// A process that adopts it adopts it as spec.ID's.
		return writeRecord(bx)
	})
}

// WarmSandboxes lists this process's unclaimed warm sandboxes: those of
// a process killed at once serve no container, and Reconcile removes them.
func (b *Backend) WarmSandboxes(context.Context) ([]string, error) {
	return b.pool.Unclaimed(), nil
}

// removeView unmounts and deletes the view dir.
func (b *Backend) removeView(dir string) {
	if err := (viewLayout{}).Remove(dir); err != nil {
		b.log.Warn("sandbox view not removed", "view", dir, "cause", err.Error())
	}
}

// removeStrayViews removes the views that serve no sandbox: in this
// process's folder those of no sandbox it runs, boots or keeps warm, and
// in the folders of processes that ended those of no sandbox still
// running (an adopted one's view stays where its process made it).
func (b *Backend) removeStrayViews() {
	keep := map[string]bool{}
	b.cidsMu.Lock()
	for cid := range b.cids {
		keep[filepath.Join(b.views, "run-"+cid)] = true
	}
	b.cidsMu.Unlock()
	for _, dir := range b.pool.Dirs() {
		keep[dir] = true
	}
	// Every running container's, whoever runs it.
	bundles, _ := os.ReadDir(b.bndls)
	for _, e := range bundles {
		if r, err := b.readRecord(e.Name()); err == nil {
			keep[r.View] = true
		}
	}
	removeIn := func(dir string) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if path := filepath.Join(dir, e.Name()); e.IsDir() && !keep[path] {
				b.removeView(path)
			}
		}
	}
	removeIn(b.views)
	procs, _ := os.ReadDir(b.cfg.PoolDir)
	for _, p := range procs {
		if pid, err := strconv.Atoi(p.Name()); err == nil && pid != os.Getpid() && !boxes.Alive(pid) {
			dir := filepath.Join(b.cfg.PoolDir, p.Name())
			removeIn(dir)
			_ = os.Remove(dir)
		}
	}
}
