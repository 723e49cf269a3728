package gvisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"threadbox/domain/sandbox"
)

// A restore spends about half its time making the sandbox runsc restores
// into: runsc's start, control groups, the file server, the sandbox
// process exec'd twice, its platform and seccomp filters. runsc restores
// as well into a container made before (runsc create: created, not
// started), and then only loads the saved state. So after each checkpoint
// the backend keeps one such container ready, over an empty view with the
// checkpointed sandbox's folder targets and limits and with the agent's
// pipes; a restore with the same targets and limits takes it, binds the
// container's folders into its view (where the file server sees them, as
// for a warm pool claim) and restores into it. Anything else restores as
// before; a restore that fails in the ready container is tried again
// without it.

// readyBox is a runsc container created ahead of a restore, under its
// relay (relay.go).
type readyBox struct {
	cid, bundle, view string
	targets           []sandbox.Mount // its folder targets, sources empty
	limits            sandbox.Limits
	procs             []string // its control group's cgroup.procs files
	relay             *relayProc
	conn              net.Conn // to its relay
}

// prepareReady makes a ready container for restores of sandboxes with
// mounts and limits l, in the background, unless one is ready or being
// made, or a mount lies outside the view.
func (b *Backend) prepareReady(mounts []sandbox.Mount, l sandbox.Limits) {
	for _, m := range mounts {
		if place("/", m.Target) == "" {
			return
		}
	}
	targets := make([]sandbox.Mount, len(mounts))
	for i, m := range mounts {
		targets[i] = sandbox.Mount{Target: m.Target, ReadOnly: m.ReadOnly}
	}
	b.readyMu.Lock()
	if b.closed || b.readyBusy || (b.ready != nil && sandbox.SameTargets(b.ready.targets, targets) && b.ready.limits == l) {
		b.readyMu.Unlock()
		return
	}
	old := b.ready
	b.ready, b.readyBusy = nil, true
	b.readyMu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if old != nil {
			b.dropReady(old)
		}
		r, err := b.makeReady(targets, l)
		if err != nil {
			b.log.Warn("no gVisor sandbox kept ready for restores", "cause", err.Error())
		}
		b.readyMu.Lock()
		b.readyBusy = false
		if r != nil && !b.closed {
			b.ready, r = r, nil
		}
		b.readyMu.Unlock()
		if r != nil {
			b.dropReady(r)
		}
	}()
}

// makeReady creates a ready container (runsc create) over an empty view
// with the places of targets.
func (b *Backend) makeReady(targets []sandbox.Mount, l sandbox.Limits) (*readyBox, error) {
	cid := newCID("restore-ready")
	b.cidsMu.Lock()
	b.cids[cid] = true
	b.cidsMu.Unlock()
	cgroupsPath := b.cgroupsPath(cid)
	r := &readyBox{cid: cid, bundle: filepath.Join(b.bndls, cid), view: filepath.Join(b.views, "run-"+cid),
		targets: targets, limits: l, procs: b.procsFiles(cgroupsPath)}
	fail := func(err error) (*readyBox, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = b.runscOut(ctx, "delete", "--force", cid)
		_ = os.RemoveAll(r.bundle)
		b.removeView(r.view)
		b.cidsMu.Lock()
		delete(b.cids, cid)
		b.cidsMu.Unlock()
		return nil, err
	}
	if err := makeView(r.view, b.rootfs, targets); err != nil {
		return fail(err)
	}
	if err := writeBundle(r.bundle, b.bundleSpec(sandbox.Spec{ID: "restore-ready", Mounts: targets}, l, cgroupsPath, r.view)); err != nil {
		return fail(err)
	}
	// runsc create exits once the sandbox waits to be started or
	// restored; the relay keeps the agent's pipes.
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.BootTimeout)
	defer cancel()
	rp, err := b.startRelay(ctx, r.bundle, true, []string{"create", "--bundle", r.bundle, cid})
	if err != nil {
		return fail(fmt.Errorf("runsc create: %w", err))
	}
	r.relay = rp
	if err := putRecord(r.bundle, record{View: r.view, RelayPID: rp.pid, RelayStart: rp.start}); err != nil {
		b.log.Warn("ready gVisor sandbox has no relay record", "cause", err.Error())
	}
	if r.conn, err = dialRelay(ctx, r.bundle); err != nil {
		rp.kill()
		rp.wait()
		return fail(err)
	}
	return r, nil
}

// takeReady returns the ready container for a restore of a sandbox with
// mounts and limits l, or nil when there is none that fits (or its
// sandbox ended); the next one is prepared.
func (b *Backend) takeReady(mounts []sandbox.Mount, l sandbox.Limits) *readyBox {
	b.readyMu.Lock()
	r := b.ready
	if r == nil || !sandbox.SameTargets(r.targets, mounts) || r.limits != l {
		b.readyMu.Unlock()
		return nil
	}
	b.ready = nil
	b.readyMu.Unlock()
	if cgroupEmpty(r.procs, 0) {
		// Its sandbox ended: it goes in the background.
		dead := r
		r = nil
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.dropReady(dead)
		}()
	}
	b.prepareReady(mounts, l)
	return r
}

// dropReady deletes a ready container that will not be used; its relay
// exits with it.
func (b *Backend) dropReady(r *readyBox) {
	_ = r.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.runscOut(ctx, "delete", "--force", r.cid); err != nil && !strings.Contains(err.Error(), "does not exist") {
		b.log.Warn("runsc container not deleted", "container", r.cid, "cause", err.Error())
	}
	r.relay.kill()
	r.relay.wait()
	b.removeGroups([]string{r.cid})
	_ = os.RemoveAll(r.bundle)
	b.removeView(r.view)
	b.cidsMu.Lock()
	delete(b.cids, r.cid)
	b.cidsMu.Unlock()
}

// closeReady stops keeping a ready container and deletes the one kept.
func (b *Backend) closeReady() {
	b.readyMu.Lock()
	b.closed = true
	r := b.ready
	b.ready = nil
	b.readyMu.Unlock()
	if r != nil {
		b.dropReady(r)
	}
}
