package docker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

// warmSlot is the host slot of one warm sandbox.
type warmSlot struct {
	name string // the slot's name: the Warm spec's ID
	dir  string // the slot folder (infra/sandbox/slot)
}

// remove unmounts and deletes the slot folder.
func (w warmSlot) remove(log *slog.Logger) {
	if err := slot.Remove(w.dir); err != nil {
		log.Warn("warm slot not removed", "slot", w.name, "cause", err.Error())
	}
}

// takeSlot forgets and returns the slot of the sandbox that serves id.
func (b *Backend) takeSlot(id string) (warmSlot, bool) {
	b.slotsMu.Lock()
	defer b.slotsMu.Unlock()
	ws, ok := b.slots[id]
	delete(b.slots, id)
	return ws, ok
}

// warmUnsupported says why this backend cannot keep warm sandboxes, or "".
func (b *Backend) warmUnsupported() string {
	switch {
	case b.cfg.Runtime != DefaultRuntime:
		// gVisor's gofer serves each bind from the host folder it opened at
		// start: a mount made on that folder later is never seen inside.
		return fmt.Sprintf("runtime %s does not see folders bound into a running sandbox (gVisor's gofer serves the host folders it opened at start)", b.cfg.Runtime)
	case b.cfg.PoolDir == "":
		return "no pool folder configured"
	case os.Geteuid() != 0:
		return "binding folders into a running sandbox needs root"
	}
	return ""
}

// Warm boots a warm pool sandbox named spec.ID: its folders (spec.Mounts'
// targets) are the empty subfolders of a slot, bound with rslave
// propagation, and its container carries LabelWarm. ErrUnsupported under
// runsc, without PoolDir or without root.
func (b *Backend) Warm(ctx context.Context, spec sandbox.Spec) error {
	if why := b.warmUnsupported(); why != "" {
		return fmt.Errorf("docker: warm pool: %w: %s", sandbox.ErrUnsupported, why)
	}
	ws := b.warmSlot(spec.ID)
	// Known before it exists, so that no Reconcile takes it for a stray.
	b.slotsMu.Lock()
	b.slots[spec.ID] = ws
	b.slotsMu.Unlock()
	if err := slot.Make(ws.dir, len(spec.Mounts)); err != nil {
		b.takeSlot(spec.ID)
		return fmt.Errorf("docker: warm %s: %w: %w", spec.ID, sandbox.ErrUnavailable, err)
	}
	warm := spec
	warm.Mounts = slices.Clone(spec.Mounts)
	for i := range warm.Mounts {
		warm.Mounts[i].Source = slot.Path(ws.dir, i)
	}
	err := b.boxes.Ensure(ctx, warm, nil, func(ctx context.Context, s sandbox.Spec) (*box, error) {
		bx, err := b.bootBox(ctx, s, true)
		if err == nil {
			bx.warm = &spec
		}
		return bx, err
	})
	if err != nil {
		if ws, ok := b.takeSlot(spec.ID); ok {
			ws.remove(b.log)
		}
		return fmt.Errorf("docker: warm: %w", err)
	}
	return nil
}

// Claim makes the warm sandbox slot spec.ID's: spec.Mounts (or, with
// Dirs and none, its prepared folders) are bound on the slot's subfolders,
// whence they propagate over the sandbox's empty folders, and its Docker
// container takes spec.ID's name. The sandbox's user, limits, environment
// and mounts are then those a boot of spec would give.
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	if spec.ID == "" || spec.ID == name {
		return fmt.Errorf("docker: claim %s: bad container id %q", name, spec.ID)
	}
	defer b.boxes.Lock(name)()
	defer b.boxes.Lock(spec.ID)()
	if b.boxes.Get(spec.ID) != nil {
		return fmt.Errorf("docker: claim %s: the sandbox of %s runs", name, spec.ID)
	}
	bx := b.boxes.Get(name)
	if bx == nil || bx.warm == nil || bx.warm.ID != name {
		return fmt.Errorf("docker: claim %s: %w: no unclaimed warm sandbox of that name", name, sandbox.ErrNotFound)
	}
	if b.cfg.Dirs != nil {
		d, err := b.cfg.Dirs.Prepare(ctx, spec.ID)
		if err != nil {
			return fmt.Errorf("docker: claim %s: %w", name, err)
		}
		if len(spec.Mounts) == 0 {
			spec.Mounts = d.Mounts()
		}
	}
	w := bx.warm
	if spec.Limits.Or(b.cfg.Limits) != w.Limits.Or(b.cfg.Limits) || !slices.Equal(spec.Env, w.Env) {
		return fmt.Errorf("docker: claim %s: limits or environment differ from the warm sandbox's", name)
	}
	if !sandbox.SameTargets(spec.Mounts, w.Mounts) {
		return fmt.Errorf("docker: claim %s: folders differ from the warm sandbox's", name)
	}
	b.slotsMu.Lock()
	ws, ok := b.slots[name]
	b.slotsMu.Unlock()
	if !ok {
		return fmt.Errorf("docker: claim %s: %w: no slot", name, sandbox.ErrNotFound)
	}
	for i, m := range spec.Mounts {
		if err := slot.Bind(ws.dir, i, m.Source, m.ReadOnly); err != nil {
			return fmt.Errorf("docker: claim %s: %w", name, err)
		}
	}
	// Before the rename: a restarted server reads the id of a claimed
	// sandbox whose name is a hash of it from its slot (reconcileID).
	if err := slot.SetOwner(ws.dir, spec.ID); err != nil {
		return fmt.Errorf("docker: claim %s: %w", name, err)
	}
	newName := b.ContainerName(spec.ID)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := b.cli.ContainerRename(rctx, bx.dockerID, newName)
	if errdefs.IsConflict(err) {
		// A leftover container of that name (stopped, orphaned, dead).
		if rerr := b.cli.ContainerRemove(rctx, newName, container.RemoveOptions{Force: true}); rerr != nil && !errdefs.IsNotFound(rerr) {
			return fmt.Errorf("docker: claim %s: remove stale %s: %w", name, newName, rerr)
		}
		err = b.cli.ContainerRename(rctx, bx.dockerID, newName)
	}
	if err != nil {
		return fmt.Errorf("docker: claim %s: rename: %w", name, err)
	}
	b.boxes.Take(name)
	b.boxes.Forget(name)
	b.slotsMu.Lock()
	delete(b.slots, name)
	b.slots[spec.ID] = ws
	b.slotsMu.Unlock()
	bx.mu.Lock()
	bx.id, bx.name, bx.lastUsed = spec.ID, newName, time.Now()
	bx.mu.Unlock()
	b.boxes.Put(spec.ID, bx)
	b.log.Info("warm sandbox claimed", "id", spec.ID, "slot", name, "container", newName)
	return nil
}

// warmSlot returns the slot of the warm sandbox named name.
func (b *Backend) warmSlot(name string) warmSlot {
	return warmSlot{name: name, dir: filepath.Join(b.cfg.PoolDir, hostdirs.SafeID(name))}
}

// reconcileID returns the container id a container of this instance serves
// and, for a warm sandbox, its slot's name. A claimed warm sandbox's id is
// the one Claim recorded in its slot (its labels still name the slot), when
// that id gives the container's name; else it is read from the name
// itself, which works for the ids that are their own safe names
// (hostdirs.SafeID). For others id is "" and Reconcile removes the sandbox.
func (b *Backend) reconcileID(labels map[string]string, names []string) (id, warmName string) {
	id = labels[LabelContainer]
	if labels[LabelWarm] != "true" {
		return id, ""
	}
	warmName = id
	if len(names) == 0 {
		return id, warmName
	}
	name := strings.TrimPrefix(names[0], "/")
	if name == b.ContainerName(warmName) {
		return id, warmName // not claimed
	}
	claimed, ok := strings.CutPrefix(name, "threadbox-"+b.cfg.Instance+"-")
	if !ok {
		return "", warmName
	}
	// A hashed name is a safe name too, so the slot is asked first.
	if owner, err := slot.Owner(b.warmSlot(warmName).dir); err == nil && b.ContainerName(owner) == name {
		return owner, warmName
	}
	if hostdirs.SafeID(claimed) != claimed {
		return "", warmName
	}
	return claimed, warmName
}

// removeStraySlots removes the slots under PoolDir that serve no sandbox:
// neither one this backend holds or boots nor one of seen (whose
// containers exist). Their sandboxes were removed while no process held
// them.
func (b *Backend) removeStraySlots(seen map[string]bool) {
	if b.cfg.PoolDir == "" {
		return
	}
	entries, err := os.ReadDir(b.cfg.PoolDir)
	if err != nil {
		return
	}
	b.slotsMu.Lock()
	held := map[string]bool{}
	for _, ws := range b.slots {
		held[filepath.Base(ws.dir)] = true
	}
	b.slotsMu.Unlock()
	for name := range seen {
		held[hostdirs.SafeID(name)] = true
	}
	for _, e := range entries {
		if e.IsDir() && !held[e.Name()] {
			warmSlot{name: e.Name(), dir: filepath.Join(b.cfg.PoolDir, e.Name())}.remove(b.log)
		}
	}
}
