package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// sh runs script in the sandbox id on be and returns its trimmed output.
func sh(t *testing.T, be *Backend, id, script string) string {
	t.Helper()
	return sandboxtest.Bash(t, be, id, script, 30*time.Second)
}

// living is a sandbox with a life to checkpoint: an interpreter session
// of this process (tagged replTag) holding x = 41, the background holder
// and what script wrote, and an empty folder for its image.
type living struct {
	id    string
	d     hostdirs.Dirs
	spec  sandbox.Spec
	sess  sandbox.Session
	out   *sandboxtest.Output
	pid   string // the holder's
	image string
}

// replTag tags the interpreter session of a living sandbox.
const replTag = "python:test"

// startLiving boots a living sandbox on be, named after the test, and runs
// script in it after the holder.
func startLiving(t *testing.T, be *Backend, script string) living {
	t.Helper()
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	l := living{id: "ckpt-" + strings.ReplaceAll(t.Name(), "/", "-"), out: &sandboxtest.Output{}}
	var err error
	if l.d, err = dirs.Prepare(ctx, l.id); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = dirs.Remove(ctx, l.id) })
	l.spec = sandbox.Spec{ID: l.id, Mounts: l.d.Mounts(), Limits: sandbox.Limits{MemoryBytes: 512 << 20}}
	if err := be.Ensure(ctx, l.spec); err != nil {
		t.Fatal(err)
	}
	if l.sess, err = be.Start(ctx, l.id, sandbox.Command{Args: []string{"python3", "-u", "-c", sandboxtest.REPL}, Output: l.out.Write, Tag: replTag}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.sess.Write([]byte("x = 41; print('set', flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	l.out.WaitFor(t, "set", 20*time.Second)
	l.pid = sh(t, be, l.id, sandboxtest.Holder+"; "+script)
	l.image = filepath.Join(t.TempDir(), "image")
	if err := os.Mkdir(l.image, 0o700); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCheckpointRestore: a sandbox's life survives a checkpoint, its stop
// and a restore — an interpreter session of this process holding a
// variable, a background process holding another and 50 MiB, /tmp — with
// the same backend (its session goes on), and after a new backend
// instance (a restart of the managing process: new runsc container ids)
// restores a copy of the checkpoint at another path.
func TestCheckpointRestore(t *testing.T) {
	be := newTestBackend(t, Config{})
	ctx := context.Background()
	if c := be.Checkpoints(ctx); !c.Supported || !strings.Contains(c.Mechanism, "runsc") {
		t.Fatalf("Checkpoints = %+v, want supported with the runsc build", c)
	}
	l := startLiving(t, be, "echo kept > /tmp/kept; echo file > /home/agent/workspace/file")
	id, spec, sess, out, pid, image := l.id, l.spec, l.sess, l.out, l.pid, l.image

	start := time.Now()
	if err := be.Checkpoint(ctx, id, image); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if st, err := be.Status(ctx, id); err != nil || st.State != sandbox.StateStopped {
		t.Fatalf("status after the checkpoint: %+v %v, want stopped", st, err)
	}
	if _, err := be.Exec(ctx, id, sandbox.Command{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("exec in a checkpointed sandbox: %v, want unavailable", err)
	}
	start = time.Now()
	if err := be.Restore(ctx, spec, image); err != nil {
		t.Fatal(err)
	}
	got := sh(t, be, id, "cat /tmp/kept /home/agent/workspace/file; kill -0 "+pid+" && echo alive")
	first := time.Since(start)
	t.Logf("checkpoint %v (image %d MiB), restore to the first command's result %v", took, hostdirs.TreeBytes(image)>>20, first)
	if got != "kept\nfile\nalive" {
		t.Fatalf("after the restore: %q, want /tmp, the files and the background process", got)
	}
	// The session of this process goes on: the interpreter kept x.
	if _, err := sess.Write([]byte("print(x + 1, flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "42", 20*time.Second)
	if got := sh(t, be, id, sandboxtest.AskHolder); got != "42" {
		t.Fatalf("background process answered %q, want 42", got)
	}

	// A restart: the checkpoint is taken, this backend instance goes, and
	// a new one restores a copy of it at another path.
	image2 := filepath.Join(t.TempDir(), "image")
	if err := os.Mkdir(image2, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := be.Checkpoint(ctx, id, image2); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
		t.Fatal("the session ended with Done; a closed backend's sessions fail their Wait")
	default:
	}
	if _, err := sess.Wait(ctx); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("session of a closed backend: %v, want unavailable", err)
	}
	copied := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", image2, copied).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	_ = os.RemoveAll(image2)
	be2 := newTestBackend(t, Config{})
	if err := be2.Restore(ctx, spec, copied); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, be2, id, sandboxtest.AskHolder+"; cat /tmp/kept"); got != "42kept" && got != "42\nkept" {
		t.Fatalf("after a restart: %q, want the background process's 42 and /tmp", got)
	}
	// The new backend's requests are numbered past the old ones: sessions
	// and commands start as before.
	var out2 sandboxtest.Output
	if _, err := be2.Start(ctx, id, sandbox.Command{Args: []string{"python3", "-u", "-c", "print('new', flush=True)"}, Output: out2.Write}, nil); err != nil {
		t.Fatal(err)
	}
	out2.WaitFor(t, "new", 20*time.Second)
}

// TestRestoreIncompatible: a checkpoint this server cannot restore —
// without its record, taken by another runsc build, with other folders,
// or damaged — is ErrCheckpointIncompatible, and the sandbox then boots
// fresh over its files.
func TestRestoreIncompatible(t *testing.T) {
	be := newTestBackend(t, Config{})
	ctx := context.Background()
	dirs := hostdirs.New(t.TempDir(), hostdirs.Options{})
	id := "ckpt-incompatible"
	d, err := dirs.Prepare(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = dirs.Remove(ctx, id) })
	spec := sandbox.Spec{ID: id, Mounts: d.Mounts()}
	if err := be.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	sh(t, be, id, "echo file > /home/agent/workspace/file; echo tmp > /tmp/t")
	image := filepath.Join(t.TempDir(), "image")
	if err := os.Mkdir(image, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := be.Checkpoint(ctx, id, image); err != nil {
		t.Fatal(err)
	}
	record, err := os.ReadFile(filepath.Join(image, boxes.CheckpointRecordFile))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m *boxes.CheckpointRecord)) func() {
		return func() {
			var m boxes.CheckpointRecord
			if err := json.Unmarshal(record, &m); err != nil {
				t.Fatal(err)
			}
			f(&m)
			data, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(image, boxes.CheckpointRecordFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	damage := func() {
		edit(func(*boxes.CheckpointRecord) {})()
		entries, _ := os.ReadDir(image)
		for _, e := range entries {
			if e.Name() != boxes.CheckpointRecordFile {
				if err := os.Truncate(filepath.Join(image, e.Name()), 100); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	tests := []struct {
		name  string
		spoil func()
		spec  sandbox.Spec
		want  string
	}{
		{"no record", func() { _ = os.Remove(filepath.Join(image, boxes.CheckpointRecordFile)) }, spec, boxes.CheckpointRecordFile},
		{"another runsc build", edit(func(m *boxes.CheckpointRecord) { m.Image.Runtime = "runsc version 0.0~20221219.0" }), spec, "runtime"},
		{"another root filesystem", edit(func(m *boxes.CheckpointRecord) { m.Image.RootFS = "/elsewhere" }), spec, "root filesystem"},
		{"other folders", edit(func(*boxes.CheckpointRecord) {}), sandbox.Spec{ID: id, Mounts: d.Mounts()[:2]}, "folders"},
		{"damaged image", damage, spec, "restoring container"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spoil()
			err := be.Restore(ctx, tt.spec, image)
			if !errors.Is(err, sandbox.ErrCheckpointIncompatible) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore = %v, want an incompatible checkpoint naming %q", err, tt.want)
			}
			if st, _ := be.Status(ctx, id); st.State == sandbox.StateRunning {
				t.Fatal("a refused restore left a sandbox running")
			}
		})
	}
	if err := be.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, be, id, "cat /home/agent/workspace/file; test -e /tmp/t && echo tmp kept || echo fresh"); got != "file\nfresh" {
		t.Fatalf("fresh boot after the refused restores: %q, want the files and a fresh /tmp", got)
	}
}

// TestCheckpointRunning: a checkpoint that leaves the sandbox running
// pauses nothing its processes notice — this process's interpreter
// session and the background process go on — and a later restore from it
// takes the sandbox back to that moment, after it changed /tmp, killed the
// background process and ran on: the interpreter (attached by a new
// backend instance, as after a rewind by another server), the background
// process with its variable and /tmp are as they were at the checkpoint,
// over files put back as they were then.
func TestCheckpointRunning(t *testing.T) {
	be := newTestBackend(t, Config{})
	ctx := context.Background()
	l := startLiving(t, be, "echo then > /tmp/kept; echo then > /home/agent/workspace/file")
	id, spec, d, sess, out, pid, image := l.id, l.spec, l.d, l.sess, l.out, l.pid, l.image

	start := time.Now()
	if err := be.CheckpointRunning(ctx, id, image); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint leaving the sandbox running: %v, image %d MiB", time.Since(start), hostdirs.TreeBytes(image)>>20)
	if st, err := be.Status(ctx, id); err != nil || st.State != sandbox.StateRunning {
		t.Fatalf("status after the checkpoint: %+v %v, want running", st, err)
	}
	// Everything goes on: the session, the background process, commands.
	if _, err := sess.Write([]byte("x = 99; print('later', x, flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "later 99", 20*time.Second)
	if got := sh(t, be, id, sandboxtest.AskHolder); got != "42" {
		t.Fatalf("background process after the checkpoint answered %q, want 42", got)
	}
	// The sandbox moves on: /tmp and the workspace change, the
	// background process ends.
	sh(t, be, id, "echo now > /tmp/kept; echo now > /home/agent/workspace/file; kill "+pid)

	// Back to the checkpoint, by a new backend instance (new runsc
	// container ids, a client new to the agent), over the files as they
	// were then.
	if err := be.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Workspace, "file"), []byte("then\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	be2 := newTestBackend(t, Config{})
	if err := be2.Restore(ctx, spec, image); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, be2, id, "cat /tmp/kept /home/agent/workspace/file; kill -0 "+pid+" && echo alive"); got != "then\nthen\nalive" {
		t.Fatalf("restored: %q, want /tmp and the files as at the checkpoint and the background process alive", got)
	}
	if got := sh(t, be2, id, sandboxtest.AskHolder); got != "42" {
		t.Fatalf("restored background process answered %q, want 42", got)
	}
	var out2 sandboxtest.Output
	back, err := be2.Start(ctx, id, sandbox.Command{Tag: replTag, Attach: true, Output: out2.Write}, nil)
	if err != nil {
		t.Fatalf("attach to the restored interpreter: %v", err)
	}
	if _, err := back.Write([]byte("print('x is', x, flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	out2.WaitFor(t, "x is 41", 20*time.Second)
}

// waitReady waits until be keeps a container ready to restore into.
func waitReady(t *testing.T, be *Backend) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		be.readyMu.Lock()
		r := be.ready
		be.readyMu.Unlock()
		if r != nil {
			return r.cid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no container was made ready for a restore after the checkpoint")
	return ""
}

// TestRestoreIntoReadyContainer: after a checkpoint the backend keeps a
// runsc container created ahead (over an empty view, with the agent's
// pipes), and the restore goes into it: the container's folders are bound
// into its view, the session of this process and the background process
// go on, the files and /tmp are there, and a new ready container is made
// for the next restore. A restore of other limits does not take it.
func TestRestoreIntoReadyContainer(t *testing.T) {
	be := newTestBackend(t, Config{})
	ctx := context.Background()
	l := startLiving(t, be, "echo kept > /tmp/kept; echo file > /home/agent/workspace/file")
	if err := be.Checkpoint(ctx, l.id, l.image); err != nil {
		t.Fatal(err)
	}
	cid := waitReady(t, be)
	if err := be.Restore(ctx, l.spec, l.image); err != nil {
		t.Fatal(err)
	}
	if got := be.boxes.Get(l.id).cid; got != cid {
		t.Fatalf("restored into runsc container %s, want the ready %s", got, cid)
	}
	if got := sh(t, be, l.id, "cat /tmp/kept /home/agent/workspace/file; echo new > /home/agent/workspace/new"); got != "kept\nfile" {
		t.Fatalf("after the restore: %q, want /tmp and the files", got)
	}
	if data, err := os.ReadFile(filepath.Join(l.d.Workspace, "new")); err != nil || string(data) != "new\n" {
		t.Fatalf("a file written in the restored sandbox reads %q on the host (%v)", data, err)
	}
	if _, err := l.sess.Write([]byte("print(x + 1, flush=True)\n")); err != nil {
		t.Fatal(err)
	}
	l.out.WaitFor(t, "42", 20*time.Second)
	if got := sh(t, be, l.id, sandboxtest.AskHolder); got != "42" {
		t.Fatalf("background process answered %q, want 42", got)
	}
	// The next one is made; a restore with other limits leaves it.
	next := waitReady(t, be)
	if next == cid {
		t.Fatal("the ready container was not replaced after its use")
	}
	image2 := filepath.Join(t.TempDir(), "image2")
	if err := os.Mkdir(image2, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := be.Checkpoint(ctx, l.id, image2); err != nil {
		t.Fatal(err)
	}
	other := l.spec
	other.Limits.MemoryBytes = 256 << 20
	if err := be.Restore(ctx, other, image2); err != nil {
		t.Fatal(err)
	}
	if got := be.boxes.Get(l.id).cid; strings.HasPrefix(got, "restore-ready") {
		t.Fatalf("a restore of other limits went into the ready container %s", got)
	}
	if got := sh(t, be, l.id, sandboxtest.AskHolder); got != "42" {
		t.Fatalf("background process answered %q, want 42", got)
	}
}
