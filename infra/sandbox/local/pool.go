package local

import (
	"context"
	"fmt"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/slot"
)

// Warm boots a warm pool jail named spec.ID (boxes.Pool): its wrapper's
// mount namespace is a slave of the host's, so the folders Claim binds on
// the slot reach the jail. ErrUnsupported without root (the wrapper
// stages as root), without PoolDir or without unshare(1).
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
	return b.pool.Warm(ctx, spec, b.Stop, func(ctx context.Context, s sandbox.Spec) (*jail, error) {
		return b.bootJail(ctx, s, true)
	})
}

// Claim makes the warm jail name spec.ID's (boxes.Pool).
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	return b.pool.Claim(ctx, name, spec, b.cfg.Dirs, b.cfg.Limits, func(j *jail, _ boxes.Slot) error {
		j.id = spec.ID
		return nil
	})
}

// WarmSandboxes lists this process's unclaimed warm jails: jails end
// with the process that booted them, so there are no others.
func (b *Backend) WarmSandboxes(context.Context) ([]string, error) {
	return b.pool.Unclaimed(), nil
}
