package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

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

// Warm boots a warm pool sandbox named spec.ID (boxes.Pool): its folders
// are bound with rslave propagation, and its container carries LabelWarm.
// ErrUnsupported under runsc, without PoolDir or without root.
func (b *Backend) Warm(ctx context.Context, spec sandbox.Spec) error {
	if why := b.warmUnsupported(); why != "" {
		return fmt.Errorf("docker: warm pool: %w: %s", sandbox.ErrUnsupported, why)
	}
	return b.pool.Warm(ctx, spec, b.Stop, func(ctx context.Context, s sandbox.Spec) (*box, error) {
		return b.bootBox(ctx, s, true)
	})
}

// Claim makes the warm sandbox name spec.ID's (boxes.Pool), and its Docker
// container takes spec.ID's name. The sandbox's user, limits, environment
// and mounts are then those a boot of spec would give. The container is
// renamed after Claim returns: the slot's owner file, written first, is
// what says the sandbox is spec.ID's (reconcileID), and a rename is an
// Engine API round trip that made up most of a claim's time.
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	return b.pool.Claim(ctx, name, spec, b.cfg.Dirs, b.cfg.Limits, func(bx *box, sl boxes.Slot) error {
		// Before the rename: a restarted server reads the id of a claimed
		// sandbox from its slot, whatever its container's name.
		if err := slot.SetOwner(sl.Dir, spec.ID); err != nil {
			return err
		}
		newName := b.ContainerName(spec.ID)
		renamed := make(chan struct{})
		bx.mu.Lock()
		bx.id, bx.name, bx.lastUsed, bx.renamed = spec.ID, newName, time.Now(), renamed
		bx.mu.Unlock()
		b.renames.Add(1)
		go func() {
			defer b.renames.Done()
			defer close(renamed)
			if err := b.rename(context.WithoutCancel(ctx), bx.dockerID, newName); err != nil {
				b.log.Warn("claimed sandbox keeps its slot's name", "id", spec.ID, "slot", name, "cause", err.Error())
			}
		}()
		return nil
	})
}

// rename gives the container dockerID the name newName, removing a
// leftover container of that name (stopped, orphaned, dead) first.
func (b *Backend) rename(ctx context.Context, dockerID, newName string) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := b.cli.ContainerRename(rctx, dockerID, newName)
	if errdefs.IsConflict(err) {
		if rerr := b.cli.ContainerRemove(rctx, newName, container.RemoveOptions{Force: true}); rerr != nil && !errdefs.IsNotFound(rerr) {
			return fmt.Errorf("remove stale %s: %w", newName, rerr)
		}
		err = b.cli.ContainerRename(rctx, dockerID, newName)
	}
	if err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	return nil
}

// WarmSandboxes lists the unclaimed warm sandboxes of this instance on the
// Docker Engine, running or not, whichever process booted them: those
// labelled warm whose container still has its slot's name (a claim
// renames it) and whose slot names no owner (a claim writes it first).
func (b *Backend) WarmSandboxes(ctx context.Context) ([]string, error) {
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelInstance+"="+b.cfg.Instance),
		filters.Arg("label", LabelWarm+"=true"),
	)})
	if err != nil {
		return nil, fmt.Errorf("docker: warm sandboxes: %w", err)
	}
	var names []string
	for _, c := range list {
		if id, warmName := b.reconcileID(c.Labels, c.Names); warmName != "" && id == warmName {
			names = append(names, warmName)
		}
	}
	return names, nil
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
		// Claimed if its slot names an owner: Claim writes the owner
		// before it renames the container.
		if owner, err := slot.Owner(b.pool.Slot(warmName).Dir); err == nil && owner != "" {
			return owner, warmName
		}
		return id, warmName // not claimed
	}
	claimed, ok := strings.CutPrefix(name, "threadbox-"+b.cfg.Instance+"-")
	if !ok {
		return "", warmName
	}
	// A hashed name is a safe name too, so the slot is asked first.
	if owner, err := slot.Owner(b.pool.Slot(warmName).Dir); err == nil && b.ContainerName(owner) == name {
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
	held := map[string]bool{}
	for _, dir := range b.pool.Dirs() {
		held[filepath.Base(dir)] = true
	}
	for name := range seen {
		held[hostdirs.SafeID(name)] = true
	}
	for _, e := range entries {
		if e.IsDir() && !held[e.Name()] {
			b.pool.Remove(boxes.Slot{Name: e.Name(), Dir: filepath.Join(b.cfg.PoolDir, e.Name())})
		}
	}
}
