package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/sandboxtest"
)

// created makes a runsc container of be that is created but not started,
// as runsc reports one being booted, annotated as made by maker; it is
// deleted at the end of the test. It returns the runsc container id.
func created(t *testing.T, be *Backend, id string, maker owner) string {
	t.Helper()
	ctx := context.Background()
	cid := newCID(id)
	view := filepath.Join(be.views, "run-"+cid)
	if err := makeView(view, be.rootfs, nil); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(be.bndls, cid)
	spec := be.bundleSpec(sandbox.Spec{ID: id}, be.limits(sandbox.Limits{}), be.cgroupsPath(cid), view)
	spec.Annotations[annotationOwner] = maker.String()
	if err := writeBundle(bundle, spec); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() {
		_, _ = be.runscOut(ctx, "delete", "--force", cid)
		be.removeView(view)
	})
	// The sandbox keeps the stdio runsc create hands it: a file, which no
	// one waits to be closed, rather than a pipe.
	out, err := os.Create(filepath.Join(t.TempDir(), "create.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := be.runsc(ctx, "create", "--bundle", bundle, cid)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(out.Name())
		t.Fatalf("runsc create: %v: %s", err, msg)
	}
	return cid
}

// listed reports whether be's runsc lists the container cid, and its status.
func listedStatus(t *testing.T, be *Backend, cid string) (string, bool) {
	t.Helper()
	all, err := be.list(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if c.ID == cid {
			return c.Status, true
		}
	}
	return "", false
}

// TestReconcileLeavesWhatLiveBackendsMake: a runsc container that is
// being made (created, not yet running) is left by Reconcile when its
// maker lives — another server of the same instance on the host, or this
// backend itself (a boot or warm pool boot under way) — even when the
// caller's leases know nothing of it; one whose maker ended is removed.
func TestReconcileLeavesWhatLiveBackendsMake(t *testing.T) {
	a := newTestBackend(t, Config{})
	// Another live server of the instance, on the same state folder, with
	// views of its own.
	other := newTestBackend(t, Config{Settings: a.cfg.Settings, StateDir: a.cfg.StateDir, PoolDir: t.TempDir()})
	ctx := context.Background()
	drop := func(string) sandbox.Verdict { return sandbox.Drop }

	othersBoot := created(t, other, "booting-elsewhere", other.self)
	ownBoot := created(t, a, "warm-booting-here", a.self)
	a.cidsMu.Lock()
	a.cids[ownBoot] = true // as start records it before runsc creates it
	a.cidsMu.Unlock()
	t.Cleanup(func() {
		a.cidsMu.Lock()
		delete(a.cids, ownBoot)
		a.cidsMu.Unlock()
	})
	leftover := created(t, a, "left-by-a-dead-server", deadOwner(t))
	groups := a.groupsOf(leftover)
	if len(groups) == 0 {
		t.Fatal("the container left by a dead server has no control group to look for")
	}
	if st, ok := listedStatus(t, a, othersBoot); !ok || st == "running" {
		t.Fatalf("the container being made elsewhere is %q (listed %v), want created", st, ok)
	}

	_, removed, err := a.Reconcile(ctx, drop)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listedStatus(t, a, othersBoot); !ok {
		t.Error("Reconcile removed a container another live server is making")
	}
	if _, ok := listedStatus(t, a, ownBoot); !ok {
		t.Error("Reconcile removed a container this backend is making")
	}
	if _, ok := listedStatus(t, a, leftover); ok {
		t.Error("Reconcile left the container of a server that ended")
	}
	if len(removed) != 1 || removed[0] != "left-by-a-dead-server" {
		t.Errorf("removed %v, want [left-by-a-dead-server]", removed)
	}
	if left := a.groupsOf(leftover); len(left) > 0 {
		t.Errorf("Reconcile left the control groups of the container it removed: %v", left)
	}
}

// deadOwner returns the owner of a maker that ended: a process that has
// exited.
func deadOwner(t *testing.T) owner {
	t.Helper()
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead := owner{pid: done.ProcessState.Pid(), start: "1", token: "ended"}
	if start, ok := processStart(dead.pid); ok {
		dead.start = start + "0" // the pid was given again: another process
	}
	return dead
}

// TestReconcileRemovesTheReadyContainerOfADeadServer: a container kept
// ready for restores by a server that was killed (created under its relay,
// never started) is removed by the next server's Reconcile with its relay
// and control groups.
func TestReconcileRemovesTheReadyContainerOfADeadServer(t *testing.T) {
	killed := newTestBackend(t, Config{})
	killed.self = deadOwner(t) // its containers say their maker ended
	r, err := killed.makeReady(nil, killed.limits(sandbox.Limits{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killed.dropReady(r) })
	if len(killed.groupsOf(r.cid)) == 0 {
		t.Fatal("the ready container has no control group to look for")
	}
	if st, ok := listedStatus(t, killed, r.cid); !ok || st != "created" {
		t.Fatalf("the ready container is %q (listed %v), want created", st, ok)
	}
	if !r.relay.alive() {
		t.Fatal("the ready container's relay is not running before Reconcile")
	}
	next := newTestBackend(t, Config{Settings: killed.cfg.Settings, StateDir: killed.cfg.StateDir, PoolDir: t.TempDir()})
	if _, _, err := next.Reconcile(context.Background(), func(string) sandbox.Verdict { return sandbox.Drop }); err != nil {
		t.Fatal(err)
	}
	if _, ok := listedStatus(t, next, r.cid); ok {
		t.Error("Reconcile left the ready container of a server that ended")
	}
	exited := make(chan struct{})
	go func() {
		r.relay.wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("Reconcile left the ready container's relay running")
	}
	if left := next.groupsOf(r.cid); len(left) > 0 {
		t.Errorf("Reconcile left the control groups of the ready container: %v", left)
	}
}

// groupsOf returns the control group folders of the runsc container cid
// that exist.
func (b *Backend) groupsOf(cid string) []string {
	var out []string
	for _, r := range b.cgroupRoots() {
		dir := filepath.Join(r, b.cgroupsPath(cid))
		if _, err := os.Stat(dir); err == nil {
			out = append(out, dir)
		}
	}
	return out
}

// TestOwner: the owner annotation reads back, and tells a live process
// from one that ended or whose pid was given again.
func TestOwner(t *testing.T) {
	self := newOwner()
	got, ok := parseOwner(self.String())
	if !ok || got != self || !got.alive() {
		t.Fatalf("parseOwner(%q) = %+v, %v; alive %v", self.String(), got, ok, got.alive())
	}
	other := self
	other.start += "0"
	if other.alive() {
		t.Error("a process with another start time is taken for this one")
	}
	for _, bad := range []string{"", "1/2", "x/1/a", "0/1/a", "1//a", strconv.Itoa(self.pid) + "/1/"} {
		if _, ok := parseOwner(bad); ok {
			t.Errorf("parseOwner(%q) accepted", bad)
		}
	}
}
