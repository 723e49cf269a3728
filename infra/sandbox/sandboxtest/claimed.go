package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
)

// ClaimedIsolation checks the warm pool's promise on be (a backend whose
// Warm works): a claimed sandbox shows nothing of the pool's life or of
// another claim — not another container's files, not the processes,
// environment or /tmp of the sandbox's previous claimant (a warm sandbox
// is never claimed twice and goes when its claim ends) — runs as the
// sandbox user, and serves the folders of the container that claimed it.
func ClaimedIsolation(t *testing.T, be sandbox.Backend) {
	t.Helper()
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	env := []string{"POOL_ENV=same"}
	claim := func(slotName, id string) {
		t.Helper()
		Cleanup(t, func() { _ = be.Remove(ctx, id); _ = be.Remove(ctx, slotName); _ = dirs.Remove(ctx, id) })
		if err := be.Warm(ctx, sandbox.Spec{ID: slotName, Mounts: sandbox.FolderTargets(), Env: env}); err != nil {
			t.Fatalf("warm %s: %v", slotName, err)
		}
		d, err := dirs.Prepare(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Claim(ctx, slotName, sandbox.Spec{ID: id, Mounts: d.Mounts(), Env: env}); err != nil {
			t.Fatalf("claim %s for %s: %v", slotName, id, err)
		}
	}
	// One check walks the whole root filesystem (secretSearch).
	run := func(id, script string) string {
		t.Helper()
		r, err := be.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: walkTimeout})
		if err != nil {
			t.Fatalf("%s: %q: %v", id, script, err)
		}
		return strings.TrimSpace(string(r.Stdout) + string(r.Stderr))
	}
	a, b := fmt.Sprintf("iso-a-%d", time.Now().UnixNano()), fmt.Sprintf("iso-b-%d", time.Now().UnixNano())
	claim("warm-iso-1", a)
	if got := run(a, "echo secret > secret-of-a.txt; echo tmp > /tmp/left-by-a; export LEFT=a; (sleep 600 >/dev/null 2>&1 &); cat secret-of-a.txt"); got != "secret" {
		t.Fatalf("a: %q", got)
	}
	if _, err := os.Stat(dirs.Dirs(a).Workspace + "/secret-of-a.txt"); err != nil {
		t.Fatalf("a's file is not in a's host folder: %v", err)
	}
	// a's claim ends: its sandbox goes, and its slot with it.
	if err := be.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := be.Claim(ctx, "warm-iso-1", sandbox.Spec{ID: b, Mounts: dirs.Dirs(b).Mounts(), Env: env}); err == nil {
		t.Fatal("a warm sandbox was claimed a second time")
	}
	claim("warm-iso-2", b)
	for _, c := range []struct{ script, want string }{
		{"ls -A /home/agent/workspace | wc -l", "0"},
		{secretSearch, "end"},
		{"ls -A /tmp; echo end", "end"},
		{"pgrep -x sleep || echo none", "none"},
		{"echo ${LEFT:-unset} $POOL_ENV", "unset same"},
		{"touch /mnt/user-data/uploads/x 2>/dev/null && echo writable || echo ro", "ro"},
		{"id -u", fmt.Sprint(hostdirs.SandboxUID)},
		{"echo hi > mine.txt && cat mine.txt", "hi"},
	} {
		if got := run(b, c.script); got != c.want {
			t.Errorf("%s: %q, want %q", c.script, got, c.want)
		}
	}
	if _, err := os.Stat(dirs.Dirs(b).Workspace + "/mine.txt"); err != nil {
		t.Errorf("b's file is not in b's host folder: %v", err)
	}
	if _, err := os.Stat(dirs.Dirs(a).Workspace + "/mine.txt"); err == nil {
		t.Error("b's file reached a's folder")
	}
}

// MeteredBackend is a backend that reads its sandboxes' CPU time.
type MeteredBackend interface {
	sandbox.Backend
	cpuMeter
}

// Claiming returns be booting every sandbox as the warm pool does: a warm
// sandbox with no folders first, then claimed for the container, so that
// Run checks claimed sandboxes.
func Claiming(be MeteredBackend) sandbox.Backend { return claiming{be} }

// claiming is Claiming's backend.
type claiming struct{ MeteredBackend }

var warmSeq atomic.Int64

func (c claiming) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if st, err := c.Status(ctx, spec.ID); err == nil && st.State == sandbox.StateRunning {
		return nil
	}
	name := fmt.Sprintf("warm-%d-%d", os.Getpid(), warmSeq.Add(1))
	if err := c.Warm(ctx, sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets(), Limits: spec.Limits, Env: spec.Env}); err != nil {
		return err
	}
	if err := c.Claim(ctx, name, spec); err != nil {
		_ = c.Remove(ctx, name)
		return err
	}
	return nil
}

// WarmClaimed boots the warm sandbox name on be (a backend whose Warm
// works), checks that it is listed warm, prepares the container id's
// folders in dirs with a file the host wrote in workspace (w.txt),
// uploads (u.txt) and skills (s.txt), "from host" each, has the warm
// sandbox claimed for id, and checks that it is no longer listed warm. It
// returns the container's folders; the test's cleanup removes both
// sandboxes and the folders.
func WarmClaimed(t *testing.T, be sandbox.Backend, dirs *hostdirs.Layout, name, id string) hostdirs.Dirs {
	t.Helper()
	ctx := context.Background()
	Cleanup(t, func() { _ = be.Remove(ctx, id); _ = be.Remove(ctx, name); _ = dirs.Remove(ctx, id) })
	if err := be.Warm(ctx, sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets()}); err != nil {
		t.Fatal(err)
	}
	if got, err := be.WarmSandboxes(ctx); err != nil || len(got) != 1 || got[0] != name {
		t.Fatalf("warm sandboxes: %v, %v", got, err)
	}
	d, err := dirs.Prepare(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for dir, file := range map[string]string{d.Workspace: "w.txt", d.Uploads: "u.txt", d.Skills: "s.txt"} {
		if err := os.WriteFile(dir+"/"+file, []byte("from host"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := be.Claim(ctx, name, sandbox.Spec{ID: id, Mounts: d.Mounts()}); err != nil {
		t.Fatal(err)
	}
	if got, _ := be.WarmSandboxes(ctx); len(got) != 0 {
		t.Fatalf("claimed sandbox still listed warm: %v", got)
	}
	return d
}
