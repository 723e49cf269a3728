package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// sh runs script in the VM id on b and returns its trimmed output.
func sh(t *testing.T, b *Backend, id, script string) string {
	t.Helper()
	return sandboxtest.Bash(t, b, id, script, 2*time.Minute)
}

// emptyDir returns a new empty folder for a checkpoint.
func emptyDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "image")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// clockOff returns how far the guest's clock is from the host's
// (sandboxtest.ClockOff).
func clockOff(t *testing.T, b *Backend, id string) time.Duration {
	t.Helper()
	var guest int64
	before := time.Now()
	if got := sh(t, b, id, "date +%s%N"); func() bool { _, err := fmt.Sscan(got, &guest); return err != nil }() {
		t.Fatalf("date: %q", got)
	}
	return sandboxtest.ClockOff(before, time.Now(), guest)
}

// TestCheckpointRestore: a VM's life survives a checkpoint, its end and a
// restore — an interpreter session of this process holding a variable, a
// background process holding another, 50 MiB and a workspace file open,
// /tmp — with the guest's clock the host's again; a checkpoint left
// running goes on, and a new backend (a restart) restores it; a
// checkpoint this server cannot restore is refused as incompatible, and
// the VM then boots fresh over its files.
func TestCheckpointRestore(t *testing.T) {
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	if c := b.Checkpoints(ctx); !c.Supported || !strings.Contains(c.Mechanism, "QEMU") {
		t.Fatalf("Checkpoints = %+v, want supported, naming QEMU", c)
	}
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	id := fmt.Sprintf("ckpt-%d", time.Now().UnixNano())
	d, err := dirs.Prepare(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = dirs.Remove(ctx, id) })
	spec := sandbox.Spec{ID: id, Mounts: d.Mounts(), Limits: sandbox.Limits{MemoryBytes: 512 << 20}}
	if err := b.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	out := &sandboxtest.Output{}
	sess, err := b.Start(ctx, id, sandbox.Command{Args: []string{"python3", "-u", "-c", sandboxtest.REPL}, Output: out.Write, Tag: "python:test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Write([]byte("x = 41; print('set', flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "set", 2*time.Minute)
	pid := sh(t, b, id, sandboxtest.Holder+"; echo kept > /tmp/kept; echo file > /home/agent/workspace/file")

	image := emptyDir(t)
	// The owner's sweeper looks boxes up while a checkpoint ends the VM:
	// it finds the VM running or ending, never a box without its client.
	looking, looked := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-looking:
				looked <- n
				return
			default:
			}
			b.boxes.Live(id)
			n++
		}
	}()
	start := time.Now()
	err = b.Checkpoint(ctx, id, image)
	took := time.Since(start)
	close(looking)
	t.Logf("the box was looked up %d times during the checkpoint", <-looked)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := b.Status(ctx, id); err != nil || st.State != sandbox.StateStopped {
		t.Fatalf("status after the checkpoint: %+v %v, want stopped", st, err)
	}
	if _, err := b.Exec(ctx, id, sandbox.Command{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("exec in a checkpointed VM: %v, want unavailable", err)
	}
	// The guest's clock stands still while it is saved.
	time.Sleep(4 * time.Second)
	start = time.Now()
	if err := b.Restore(ctx, spec, image); err != nil {
		t.Fatal(err)
	}
	got := sh(t, b, id, "cat /tmp/kept /home/agent/workspace/file; kill -0 "+pid+" && echo alive")
	t.Logf("checkpoint %v (%d MiB), restore to the first command's result %v", took, hostdirs.TreeBytes(image)>>20, time.Since(start))
	if got != "kept\nfile\nalive" {
		t.Fatalf("after the restore: %q, want /tmp, the files and the background process", got)
	}
	if off := clockOff(t, b, id); off < -2*time.Second || off > 2*time.Second {
		t.Errorf("after the restore the guest's clock is %v off the host's", off)
	}
	if _, err := sess.Write([]byte("print(x + 1, flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "42", 2*time.Minute)
	if got := sh(t, b, id, sandboxtest.AskHolder+"; echo; cat /home/agent/workspace/held.log"); got != "42\nanswered" {
		t.Fatalf("background process answered %q, want 42 and a line through the file it held open", got)
	}

	// A checkpoint left running: the VM goes on.
	running := emptyDir(t)
	if err := b.CheckpointRunning(ctx, id, running); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, b, id, "echo after > /tmp/after; cat /tmp/kept"); got != "kept" {
		t.Fatalf("after a checkpoint left running: %q", got)
	}
	if off := clockOff(t, b, id); off < -2*time.Second || off > 2*time.Second {
		t.Errorf("after a checkpoint left running the guest's clock is %v off the host's", off)
	}
	// A restart: this backend goes, a new one restores that checkpoint.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := newTestBackend(t, Config{})
	if err := b2.Restore(ctx, spec, running); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, b2, id, sandboxtest.AskHolder+"; echo; test -e /tmp/after && echo after || echo saved; cat /tmp/kept"); got != "42\nsaved\nkept" {
		t.Fatalf("after a restart: %q, want the holder's 42, /tmp as it was saved (without what came after)", got)
	}
	if off := clockOff(t, b2, id); off < -2*time.Second || off > 2*time.Second {
		t.Errorf("after a restart's restore the guest's clock is %v off the host's", off)
	}
	var out2 sandboxtest.Output
	if _, err := b2.Start(ctx, id, sandbox.Command{Args: []string{"python3", "-u", "-c", "print('new', flush=True)"}, Output: out2.Write}, nil); err != nil {
		t.Fatal(err)
	}
	out2.WaitFor(t, "new", 2*time.Minute)

	// Another agent: the checkpoint is refused, and the VM boots fresh.
	other := emptyDir(t)
	if err := b2.Checkpoint(ctx, id, other); err != nil {
		t.Fatal(err)
	}
	var rec boxes.CheckpointRecord
	data, err := os.ReadFile(filepath.Join(other, boxes.CheckpointRecordFile))
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil {
		t.Fatal(err)
	}
	rec.Image.Agent = "sha256:another"
	data, _ = json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(other, boxes.CheckpointRecordFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b2.Restore(ctx, spec, other); !errors.Is(err, sandbox.ErrCheckpointIncompatible) || !strings.Contains(err.Error(), "agent") {
		t.Fatalf("restore with another agent: %v, want incompatible, naming the agent", err)
	}
	if err := b2.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, b2, id, "cat /home/agent/workspace/file; ls /tmp | wc -l"); got != "file\n0" {
		t.Fatalf("the fresh VM: %q, want the files and an empty /tmp", got)
	}
}
