package gvisor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestConformanceClaimed runs the conformance suite on sandboxes claimed
// from the warm pool.
func TestConformanceClaimed(t *testing.T) {
	newBackend := func(t *testing.T) sandbox.Backend { return sandboxtest.Claiming(newTestBackend(t, Config{})) }
	caps := sandboxtest.Capabilities{Memory: sandboxtest.MemoryOOMKill, Pids: true, Disk: true, CPU: true}
	sandboxtest.Run(t, newBackend, caps)
}

// TestClaimedIsolation: a claimed sandbox sees only its claimant's
// folders, none of another container's files or of a previous claimant's
// processes, environment or /tmp, and is never claimed twice.
func TestClaimedIsolation(t *testing.T) {
	sandboxtest.ClaimedIsolation(t, newTestBackend(t, Config{}))
}

// TestClaimedFolders: a warm sandbox is listed until claimed; once
// claimed it serves the container's folders (files the host wrote before
// the claim included), read-only ones refuse writes, the home folder's
// files stay read-only, and a checkpoint of it restores with the same
// folders into a sandbox booted cold.
func TestClaimedFolders(t *testing.T) {
	rootfs, _ := prerequisites(t)
	before := rootFSEntries(t, rootfs)
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	id, name := fmt.Sprintf("claimed-%d", time.Now().UnixNano()), "warm-folders-1"
	d := sandboxtest.WarmClaimed(t, b, dirs, name, id)
	run := func(script string) string {
		t.Helper()
		r, err := b.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("%q: %v", script, err)
		}
		return strings.TrimSpace(string(r.Stdout) + string(r.Stderr))
	}
	checks := []struct{ script, want string }{
		{"cat w.txt /mnt/user-data/uploads/u.txt /mnt/skills/s.txt", "from hostfrom hostfrom host"},
		{"touch /mnt/user-data/uploads/x 2>/dev/null && echo writable || echo ro", "ro"},
		{"touch /mnt/skills/x 2>/dev/null && echo writable || echo ro", "ro"},
		{"(echo x >> /home/agent/.bashrc) 2>/dev/null && echo writable || echo ro", "ro"},
		{"touch /home/agent/new 2>/dev/null && echo writable || echo ro", "ro"},
		{"echo out > /mnt/user-data/outputs/o.txt && echo in > /home/agent/workspace/i.txt && echo ok", "ok"},
	}
	for _, c := range checks {
		if got := run(c.script); got != c.want {
			t.Errorf("%s: %q, want %q", c.script, got, c.want)
		}
	}
	for _, f := range []string{d.Outputs + "/o.txt", d.Workspace + "/i.txt"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the sandbox's file is not on the host: %v", err)
		}
	}
	run("echo kept > /tmp/kept")
	img := t.TempDir()
	if err := b.Checkpoint(ctx, id, img); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(ctx, sandbox.Spec{ID: id, Mounts: d.Mounts()}, img); err != nil {
		t.Fatal(err)
	}
	if got := run("cat /tmp/kept w.txt; touch /mnt/skills/x 2>/dev/null && echo writable || echo ro"); got != "kept\nfrom hostro" {
		t.Errorf("restored: %q", got)
	}
	if err := b.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if after := rootFSEntries(t, rootfs); after != before {
		t.Errorf("the root filesystem changed: %q, then %q", before, after)
	}
}

// rootFSEntries lists the image's folders that the sandbox's folders are
// bound under, to tell that runsc made no mount point in them.
func rootFSEntries(t *testing.T, rootfs string) string {
	t.Helper()
	var out []string
	for _, dir := range []string{"/home/agent", "/mnt", "/mnt/user-data"} {
		entries, err := os.ReadDir(rootfs + dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, dir+"/"+e.Name())
		}
	}
	return strings.Join(out, " ")
}
