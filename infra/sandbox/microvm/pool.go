package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

// The warm pool. A warm VM is booted before any container needs it, over
// the empty folders of a slot, and a container claims it by having its
// folders bound onto the slot's (boxes.Pool). QEMU opens the root of each
// 9p share once, at its start, and a folder bound onto that root later
// would stay hidden from it; but it walks every path below the root
// afresh, crossing the mounts it meets. So each share of a warm VM is a
// folder of the slot, <slot>/<i>, whose subfolder d the guest's init
// mounts at the sandbox path (the share's mount itself is then let go),
// and the claim binds the container's folder onto <slot>/<i>/d: from then
// on every lookup the guest makes there reaches the container's files.
// The guest mounts the shares without a cache, so nothing it saw of the
// empty folder stays.

// shareSub is the subfolder of a warm VM's share that the guest mounts.
const shareSub = "d"

// shareLayout is the slot layout of warm VMs (boxes.Layout).
type shareLayout struct{}

// Make creates the slot dir with a share folder per mount, each holding
// the empty subfolder the guest mounts, owned as the container's folder
// bound onto it at the claim will be (hostdirs: the writable ones the
// sandbox user's). The guest keeps the owner and mode its mount's root had
// when it was mounted until something stats it, and checks the sandbox
// user's writes against them.
func (shareLayout) Make(dir string, mounts []sandbox.Mount) error {
	for i, m := range mounts {
		sub := filepath.Join(dir, strconv.Itoa(i), shareSub)
		err := os.MkdirAll(sub, 0o755)
		if err == nil && !m.ReadOnly {
			err = os.Chown(sub, hostdirs.SandboxUID, hostdirs.SandboxGID)
		}
		if err != nil {
			_ = slot.RemoveTree(dir)
			return fmt.Errorf("slot: %w", err)
		}
	}
	return nil
}

// Place returns the folder the container's mount i is bound onto.
func (shareLayout) Place(dir string, i int, _ sandbox.Mount) string {
	return filepath.Join(dir, strconv.Itoa(i), shareSub)
}

// Remove unmounts what was bound under the slot and deletes it; while a
// mount is left under it, it deletes nothing (a folder bound there is a
// container's).
func (shareLayout) Remove(dir string) error { return slot.RemoveTree(dir) }

// Warm starts a warm VM named spec.ID over an empty slot, restored from
// the template of its configuration (template.go); a container whose
// limits, environment and folder targets are spec's can claim it.
// The slots of processes that ended are removed first: their VMs ended
// with them. A VM restored from the template whose agent lost its
// warm-up command (boxes.ErrWarmUpLost: seen under heavy load, cause not
// yet known) is stopped and the warm VM booted instead, as when a
// restore fails.
func (b *Backend) Warm(ctx context.Context, spec sandbox.Spec) error {
	b.slotsClean.Do(func() {
		if err := b.removeSlots(false); err != nil {
			b.log.Warn("earlier warm slots not removed", "cause", err.Error())
		}
	})
	if b.cfg.NoTemplate {
		return b.pool.Warm(ctx, spec, b.Stop, b.freshWarmBoot)
	}
	return b.pool.Warm(ctx, spec, b.Stop, b.warmBoot, b.freshWarmBoot)
}

// Claim makes the warm VM name spec.ID's: the container's folders are
// bound onto the slot's places, where the guest's mounts find them.
func (b *Backend) Claim(ctx context.Context, name string, spec sandbox.Spec) error {
	return b.pool.Claim(ctx, name, spec, b.cfg.Dirs, b.cfg.Limits, func(bx *box, _ boxes.Slot) error {
		bx.id = spec.ID
		return nil
	})
}

// WarmSandboxes lists this process's unclaimed warm VMs: VMs end with the
// process that booted them, so there are no others.
func (b *Backend) WarmSandboxes(context.Context) ([]string, error) {
	return b.pool.Unclaimed(), nil
}

// Stop ends id's VM and drops its slot, if it came from the pool; its
// files stay.
func (b *Backend) Stop(ctx context.Context, id string) error {
	return b.pool.Stop(ctx, id)
}

// removeSlots removes the slot folders of processes that ended, and with
// mine this process's own folder too (at Close, once its slots are
// dropped). A slot with a mount left under it is kept.
func (b *Backend) removeSlots(mine bool) error {
	root := filepath.Dir(b.slots)
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: slots: %w", b.cfg.Name, err)
	}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() || (pid == os.Getpid()) != mine || pid != os.Getpid() && boxes.Alive(pid) {
			continue
		}
		errs = append(errs, slot.RemoveTree(filepath.Join(root, e.Name())))
	}
	_ = os.Remove(root) // when no other process's slots are left
	return errors.Join(errs...)
}
