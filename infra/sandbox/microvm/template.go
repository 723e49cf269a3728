package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/microvm/guestinit"
	"threadbox/infra/sandbox/slot"
)

// Warm VMs are restored from a template rather than each booted. The
// template is a warm VM booted once, up to where its agent holds: its
// modules loaded, its agent started, no 9p share mounted yet (QEMU saves
// no VM with one mounted). There it is saved: its RAM lives in a
// memory file (shared with the file), and QEMU writes the rest of its
// state (CPUs, devices) to a state file. A warm VM is then a QEMU started
// with the template's arguments, its own slot's shares, and the memory
// file mapped as a private copy on write, that loads the state file and
// runs: the agent goes on when the host writes "go" with its clock and a
// random seed (guestinit), mounts the shares, which QEMU serves from the
// new slot, and serves.
// The copies share the template's pages until they write them.
//
// A template serves warm VMs of one configuration (limits, environment,
// folder targets, agent, guest, accelerator); a warm spec of another
// makes a new one. If a template cannot be made or a copy restored, the
// warm VM boots instead, and the log says why.

// template is the saved warm VM of one configuration.
type template struct {
	key string
	dir string // its files: ram, state, initrd
}

func (t *template) ram() string    { return filepath.Join(t.dir, "ram") }
func (t *template) state() string  { return filepath.Join(t.dir, "state") }
func (t *template) initrd() string { return filepath.Join(t.dir, "initrd") }

// warmBoot starts the warm VM of spec: restored from the template of its
// configuration, made first if there is none, or booted when that fails.
func (b *Backend) warmBoot(ctx context.Context, spec sandbox.Spec) (*box, error) {
	if b.cfg.NoTemplate {
		return b.freshWarmBoot(ctx, spec)
	}
	t, err := b.templateFor(ctx, spec)
	if err == nil {
		bx, err := b.boot(ctx, spec, bootClone, t, "")
		if err == nil {
			return bx, nil
		}
		b.log.Warn("warm VM not restored from the template; it boots", "slot", spec.ID, "cause", err.Error())
	} else {
		b.log.Warn("no template of warm VMs; they boot", "cause", err.Error())
	}
	return b.freshWarmBoot(ctx, spec)
}

// freshWarmBoot boots spec's warm VM from its kernel, without a template.
func (b *Backend) freshWarmBoot(ctx context.Context, spec sandbox.Spec) (*box, error) {
	return b.boot(ctx, spec, bootWarm, nil, "")
}

// templateKey names the configuration of spec's warm VM, which a
// template serves. The accelerator is part of it, so it is chosen first
// (Available): a key taken before would not match the template the boot
// makes, which would be made again for the next warm VM.
func (b *Backend) templateKey(ctx context.Context, spec sandbox.Spec) (string, error) {
	if err := b.Available(ctx); err != nil {
		return "", err
	}
	g, err := LoadGuest(b.cfg.Guest, b.cfg.Kernel)
	if err != nil {
		return "", err
	}
	l := b.limits(spec.Limits)
	// The subfolder is the slot's, whatever spec's sources are.
	sh := shares(spec, true)
	for i := range sh {
		sh[i].Sub = shareSub
	}
	root, image := b.warmRoot(ctx)
	config, err := vmConfig(spec, sh, l, guestinit.FS9p, root, true)
	if err != nil {
		return "", err
	}
	// The image as it is: a template holds its pages in its page cache.
	var imageID string
	if image != "" {
		if ifi, err := os.Stat(image); err == nil {
			imageID = fmt.Sprintf("%s %d %d", image, ifi.Size(), ifi.ModTime().UnixNano())
		}
	}
	fi, err := os.Stat(b.cfg.AgentBin)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d %d\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%d %d\x00", config, fi.Size(), fi.ModTime().UnixNano(), b.cfg.AgentBin,
		g.Dir, g.Kernel, b.rootfs, imageID, b.cfg.TrustDir, l.MemoryBytes, vcpus(l.CPUs))
	b.availMu.Lock()
	h.Write([]byte(b.accel + "\x00" + cpuModel(b.accel)))
	b.availMu.Unlock()
	return hex.EncodeToString(h.Sum(nil)), nil
}

// templateFor returns the template of spec's configuration, making it
// (and dropping another configuration's) when there is none. A
// configuration whose template could not be made is not tried again.
func (b *Backend) templateFor(ctx context.Context, spec sandbox.Spec) (*template, error) {
	key, err := b.templateKey(ctx, spec)
	if err != nil {
		return nil, err
	}
	b.tmplMu.Lock()
	defer b.tmplMu.Unlock()
	if b.tmpl != nil && b.tmpl.key == key {
		return b.tmpl, nil
	}
	if err := b.tmplFailed[key]; err != nil {
		return nil, err
	}
	if b.tmpl != nil {
		_ = os.RemoveAll(b.tmpl.dir)
		b.tmpl = nil
	}
	t, err := b.makeTemplate(ctx, spec, key)
	if err != nil {
		b.tmplFailed[key] = err
		return nil, err
	}
	b.tmpl = t
	return t, nil
}

// makeTemplate boots spec's warm VM over a slot of its own, up to where
// its init holds, and saves it.
func (b *Backend) makeTemplate(ctx context.Context, spec sandbox.Spec, key string) (*template, error) {
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.dir, "template-")
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(dir, ",'") {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("template folder %q: QEMU's options cannot hold it", dir)
	}
	t := &template{key: key, dir: dir}
	// The template's shares: empty folders, which it never mounts.
	sl := filepath.Join(dir, "slot")
	if err := (shareLayout{}).Make(sl, spec.Mounts); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ts := spec
	ts.ID = "template"
	ts.Mounts = slices.Clone(spec.Mounts)
	for i := range ts.Mounts {
		ts.Mounts[i].Source = (shareLayout{}).Place(sl, i, ts.Mounts[i])
	}
	_, err = b.boot(ctx, ts, bootTemplate, t, "")
	if rerr := slot.RemoveTree(sl); err == nil {
		err = rerr
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("template: %w", err)
	}
	return t, nil
}

// TemplateMemoryKiB returns the host memory the template's memory file
// holds (its allocated blocks), or 0 without a template.
func (b *Backend) TemplateMemoryKiB() int64 {
	b.tmplMu.Lock()
	defer b.tmplMu.Unlock()
	if b.tmpl == nil {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Stat(b.tmpl.ram(), &st); err != nil {
		return 0
	}
	return st.Blocks * 512 >> 10
}
