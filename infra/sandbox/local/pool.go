package local

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

// dropSlot removes the slot of the warm jail that served id, if any.
func (b *Backend) dropSlot(id string) {
	b.slotsMu.Lock()
	dir, ok := b.slots[id]
	delete(b.slots, id)
	b.slotsMu.Unlock()
	if ok {
		if err := slot.Remove(dir); err != nil {
			b.log.Warn("warm slot not removed", "id", id, "cause", err.Error())
		}
	}
}

// Warm boots a warm pool jail named spec.ID: its folders (spec.Mounts'
// targets) are the empty subfolders of a slot, and its wrapper's mount
// namespace is a slave of the host's, so the folders Claim binds on the
// slot reach the jail. ErrUnsupported without root (the wrapper stages as
// root), without PoolDir or without unshare(1).
func (b *Backend) Warm(ctx context.Context, spec sandbox.Spec) error {
	switch {
	case !staged():
		return fmt.Errorf("local: warm pool: %w: binding folders into a running jail needs root", sandbox.ErrUnsupported)
	case b.cfg.PoolDir == "":
		return fmt.Errorf("local: warm pool: %w: no pool folder configured", sandbox.ErrUnsupported)
	}
	st, err := b.newStage()
	if err != nil {
		return fmt.Errorf("local: warm: %w: %w", sandbox.ErrUnavailable, err)
	}
	if st.unshare == "" {
		return fmt.Errorf("local: warm pool: %w: unshare (util-linux) not found", sandbox.ErrUnsupported)
	}
	// Jails end with their process, so every slot an earlier process left
	// serves nothing.
	b.slotsClean.Do(func() {
		if err := slot.Clean(b.cfg.PoolDir); err != nil {
			b.log.Warn("earlier warm slots not removed", "cause", err.Error())
		}
	})
	dir := filepath.Join(b.cfg.PoolDir, hostdirs.SafeID(spec.ID))
	b.slotsMu.Lock()
	b.slots[spec.ID] = dir
	b.slotsMu.Unlock()
	if err := slot.Make(dir, len(spec.Mounts)); err != nil {
		b.slotsMu.Lock()
		delete(b.slots, spec.ID)
		b.slotsMu.Unlock()
		return fmt.Errorf("local: warm %s: %w: %w", spec.ID, sandbox.ErrUnavailable, err)
	}
	warm := spec
	warm.Mounts = slices.Clone(spec.Mounts)
	for i := range warm.Mounts {
		warm.Mounts[i].Source = slot.Path(dir, i)
	}
	err = b.boxes.Ensure(ctx, warm, nil, func(ctx context.Context, s sandbox.Spec) (*jail, error) {
		j, err := b.bootJail(ctx, s, true)
		if err == nil {
			j.warm = &spec
		}
		return j, err
	})
	if err != nil {
		b.dropSlot(spec.ID)
		return fmt.Errorf("local: warm: %w", err)
	}
	return nil
}

// Claim makes the warm jail name spec.ID's: spec.Mounts (or, with Dirs and
// none, its prepared folders) are bound on the slot's subfolders, whence
// they propagate over the jail's empty folders.
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	if spec.ID == "" || spec.ID == name {
		return fmt.Errorf("local: claim %s: bad container id %q", name, spec.ID)
	}
	defer b.boxes.Lock(name)()
	defer b.boxes.Lock(spec.ID)()
	if b.boxes.Get(spec.ID) != nil {
		return fmt.Errorf("local: claim %s: the sandbox of %s runs", name, spec.ID)
	}
	j := b.boxes.Get(name)
	if j == nil || j.warm == nil || j.warm.ID != name {
		return fmt.Errorf("local: claim %s: %w: no unclaimed warm jail of that name", name, sandbox.ErrNotFound)
	}
	if b.cfg.Dirs != nil {
		d, err := b.cfg.Dirs.Prepare(ctx, spec.ID)
		if err != nil {
			return fmt.Errorf("local: claim %s: %w", name, err)
		}
		if len(spec.Mounts) == 0 {
			spec.Mounts = d.Mounts()
		}
	}
	if b.limits(spec.Limits) != b.limits(j.warm.Limits) || !slices.Equal(spec.Env, j.warm.Env) {
		return fmt.Errorf("local: claim %s: limits or environment differ from the warm jail's", name)
	}
	if !sandbox.SameTargets(spec.Mounts, j.warm.Mounts) {
		return fmt.Errorf("local: claim %s: folders differ from the warm jail's", name)
	}
	b.slotsMu.Lock()
	dir, ok := b.slots[name]
	b.slotsMu.Unlock()
	if !ok {
		return fmt.Errorf("local: claim %s: %w: no slot", name, sandbox.ErrNotFound)
	}
	for i, m := range spec.Mounts {
		if err := slot.Bind(dir, i, m.Source, m.ReadOnly); err != nil {
			return fmt.Errorf("local: claim %s: %w", name, err)
		}
	}
	b.boxes.Take(name)
	b.boxes.Forget(name)
	b.slotsMu.Lock()
	delete(b.slots, name)
	b.slots[spec.ID] = dir
	b.slotsMu.Unlock()
	j.id = spec.ID
	b.boxes.Put(spec.ID, j)
	b.log.Info("warm jail claimed", "id", spec.ID, "slot", name)
	return nil
}
