package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"THREADBOX_AGENT_OUTPUTS": "/env/out", "THREADBOX_AGENT_GRACE": "3s", "THREADBOX_AGENT_NOFILE": "256"}
	cfg, err := parseConfig([]string{"-workspace", "/flag/ws"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.workspace != "/flag/ws" || cfg.outputs != "/env/out" || cfg.tmpRoot != "/tmp/outputs" || cfg.grace != 3*time.Second || cfg.drain != time.Second || cfg.nofile != 256 {
		t.Fatalf("config %+v", cfg)
	}
	defaults, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if defaults.workspace != "/home/agent/workspace" || defaults.outputs != "/mnt/user-data/outputs" || defaults.grace != 2*time.Second || defaults.nofile != 0 {
		t.Fatalf("defaults %+v", defaults)
	}
	vm, err := parseConfig([]string{"-vm-init", "-vm-hold", "-vm-shares", "m0:/home/agent/workspace:rw:d m1:/mnt/skills:ro:."}, func(string) string { return "" })
	if err != nil || !vm.vmInit || !vm.vm.Hold || len(vm.vm.Shares) != 2 || vm.vm.Shares[0].Sub != "d" || !vm.vm.Shares[1].ReadOnly || vm.vm.FS != "9p" || vm.vm.Root != "shared" {
		t.Fatalf("microVM init config %+v %v", vm, err)
	}
	if vm, err = parseConfig([]string{"-vm-init", "-vm-fs", "virtiofs", "-vm-root", "image"}, func(string) string { return "" }); err != nil || vm.vm.FS != "virtiofs" || vm.vm.Root != "image" {
		t.Fatalf("microVM init config %+v %v", vm, err)
	}
	for _, args := range [][]string{{"-grace", "soon"}, {"-drain", "-1s"}, {"-log-level", "loud"}, {"-no-such-flag"}, {"-nofile", "many"}, {"-nofile", "3"},
		{"-vm-shares", "m0:/w:rw:."}, {"-vm-init", "-vm-shares", "m0:w:rw:."}, {"-vm-init", "-vm-fs", "nfs"}, {"-vm-init", "-vm-root", "disk"}} {
		if _, err := parseConfig(args, func(string) string { return "" }); err == nil {
			t.Errorf("parseConfig(%q) accepted", args)
		}
	}
}

func TestEnviron(t *testing.T) {
	got := environ([]string{"HOME=/h", "THREADBOX_AGENT_TMP=/x", "LANG=C"})
	want := []string{"HOME=/h", "LANG=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if !slices.Equal(got, want) {
		t.Fatalf("environ = %q, want %q", got, want)
	}
	if got := environ([]string{"PATH=/bin"}); !slices.Equal(got, []string{"PATH=/bin"}) {
		t.Fatalf("an existing PATH was changed: %q", got)
	}
}

func TestMoveOutputs(t *testing.T) {
	// The destination on another file system, when there is one, exercises
	// the copying fallback.
	dstRoots := []string{t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "agent-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			dstRoots = append(dstRoots, d)
		}
	}
	for _, root := range dstRoots {
		t.Run(root, func(t *testing.T) {
			src := t.TempDir()
			dst := filepath.Join(root, "outputs")
			must(t, os.MkdirAll(dst, 0o755))
			must(t, os.WriteFile(filepath.Join(dst, "a.txt"), []byte("old"), 0o644))
			must(t, os.WriteFile(filepath.Join(src, "a.txt"), []byte("new"), 0o600))
			must(t, os.WriteFile(filepath.Join(src, "b.bin"), []byte{0, 1}, 0o644))
			must(t, os.Mkdir(filepath.Join(src, "dir"), 0o755))
			must(t, os.WriteFile(filepath.Join(src, "dir", "c.txt"), []byte("c"), 0o644))
			must(t, os.Symlink("/etc/passwd", filepath.Join(src, "link")))
			must(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))

			moved, err := moveOutputs(src, dst)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{filepath.Join(dst, "a.txt"), filepath.Join(dst, "b.bin")}
			if !slices.Equal(moved, want) {
				t.Fatalf("moved %q, want %q", moved, want)
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "new" {
				t.Fatalf("a.txt = %q", b)
			}
			if st, err := os.Stat(filepath.Join(dst, "a.txt")); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("a.txt mode: %v %v", st.Mode(), err)
			}
			for _, name := range []string{"dir", "link", "fifo"} {
				if _, err := os.Lstat(filepath.Join(dst, name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s was moved: %v", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(src, "a.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("source a.txt still there: %v", err)
			}
		})
	}
}

func TestMoveOutputsReportsFailures(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "ok.txt"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "taken"), []byte("x"), 0o644))
	// A folder of the same name cannot be replaced by a file.
	must(t, os.MkdirAll(filepath.Join(dst, "taken", "inner"), 0o755))
	moved, err := moveOutputs(src, dst)
	if err == nil {
		t.Fatal("no error for a file that could not be moved")
	}
	if !slices.Equal(moved, []string{filepath.Join(dst, "ok.txt")}) {
		t.Fatalf("moved %q", moved)
	}
}

func TestReadOOMKills(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "memory.events")
	must(t, os.WriteFile(p, []byte("low 0\nhigh 0\nmax 4\noom 2\noom_kill 3\noom_group_kill 0\n"), 0o644))
	if n, ok := (&oomCount{path: p}).kills(); !ok || n != 3 {
		t.Fatalf("got %d %v, want 3 true", n, ok)
	}
	if _, ok := (&oomCount{path: filepath.Join(dir, "missing")}).kills(); ok {
		t.Fatal("missing file read as ok")
	}
	must(t, os.WriteFile(p, []byte("low 0\n"), 0o644))
	if _, ok := (&oomCount{path: p}).kills(); ok {
		t.Fatal("file without oom_kill read as ok")
	}
}

// TestOOMCountRereads: the counter's file is opened once, so each read must
// see the file as it is now, and a file longer than the first buffer (a
// virtual machine's /proc/vmstat) must be read to its end.
func TestOOMCountRereads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vmstat")
	long := strings.Repeat("nr_free_pages 12345\n", 400) // 8 KiB before the line
	must(t, os.WriteFile(p, []byte(long+"oom_kill 1\n"), 0o644))
	o := &oomCount{path: p}
	if n, ok := o.kills(); !ok || n != 1 {
		t.Fatalf("got %d %v, want 1 true", n, ok)
	}
	must(t, os.WriteFile(p, []byte(long+"oom_kill 7\n"), 0o644))
	if n, ok := o.kills(); !ok || n != 7 {
		t.Fatalf("after the count rose: got %d %v, want 7 true", n, ok)
	}
	if n, ok := (&oomCount{path: "/proc/vmstat"}).kills(); !ok || n < 0 {
		t.Fatalf("/proc/vmstat: got %d %v, want its oom_kill count", n, ok)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// inProcess runs a server in the test process over pipes and returns the
// host's ends.
func inProcess(t *testing.T) (w io.Writer, frames <-chan protocol.Frame) {
	t.Helper()
	hostW, hostR := inProcessPipes(t)
	return hostW, readFrames(hostR)
}

// readFrames returns the frames read from r, closed when r ends.
func readFrames(r io.Reader) <-chan protocol.Frame {
	ch := make(chan protocol.Frame, 64)
	go func() {
		defer close(ch)
		for {
			f, err := protocol.ReadFrame(r)
			if err != nil {
				return
			}
			ch <- f
		}
	}()
	return ch
}

// inProcessPipes runs a server in the test process over pipes and returns
// the host's ends of them, its input and its output.
func inProcessPipes(t testing.TB) (io.Writer, io.Reader) {
	return inProcessPipesLean(t, nil)
}

// inProcessLean is inProcess with a lean agent's config (lean.go).
func inProcessLean(t *testing.T, lean *leanProcs) (w io.Writer, frames <-chan protocol.Frame) {
	t.Helper()
	hostW, hostR := inProcessPipesLean(t, lean)
	return hostW, readFrames(hostR)
}

func inProcessPipesLean(t testing.TB, lean *leanProcs) (io.Writer, io.Reader) {
	t.Helper()
	root := t.TempDir()
	cfg := config{
		workspace: filepath.Join(root, "ws"), outputs: filepath.Join(root, "out"), tmpRoot: filepath.Join(root, "tmp"),
		oomEvents: filepath.Join(root, "none"), grace: time.Second, drain: time.Second, lean: lean,
	}
	must(t, os.MkdirAll(cfg.workspace, 0o755))
	hostR, agentW := io.Pipe()
	agentR, hostW := io.Pipe()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	rp := newReaper(log)
	go rp.loop(ctx)
	srv := newServer(cfg, agentW, rp, environ(os.Environ()), log)
	served := make(chan error, 1)
	go func() { served <- srv.serve(agentR) }()
	t.Cleanup(func() {
		_ = hostW.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		srv.killAll()
		// Reaped by this server's reaper, none is left to another test's.
		srv.drain(5*time.Second, false)
		cancel()
		_ = hostR.Close()
	})
	return hostW, hostR
}

func next(t *testing.T, frames <-chan protocol.Frame) protocol.Frame {
	t.Helper()
	select {
	case f, ok := <-frames:
		if !ok {
			t.Fatal("connection closed")
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no frame")
	}
	return protocol.Frame{}
}

func TestServerControlFrames(t *testing.T) {
	w, frames := inProcess(t)
	send := func(ty protocol.Type, id uint32, payload string) {
		t.Helper()
		must(t, protocol.WriteFrame(w, ty, id, []byte(payload)))
	}
	// Ping echoes its payload.
	send(protocol.TypePing, 5, "abc")
	if f := next(t, frames); f.Type != protocol.TypePong || f.ID != 5 || string(f.Payload) != "abc" {
		t.Fatalf("got %v %d %q", f.Type, f.ID, f.Payload)
	}
	// Reserved and unknown types get an Error frame.
	for _, ty := range []protocol.Type{protocol.TypeStreamOpen, protocol.Type(0x99)} {
		send(ty, 6, "")
		if f := next(t, frames); f.Type != protocol.TypeError || f.ID != 6 {
			t.Fatalf("type %v answered with %v %d", ty, f.Type, f.ID)
		}
	}
	// Bad Exec payloads and empty argv get an Error frame.
	for _, payload := range []string{"{", `{"args":[]}`} {
		send(protocol.TypeExec, 7, payload)
		if f := next(t, frames); f.Type != protocol.TypeError || f.ID != 7 {
			t.Fatalf("exec %q answered with %v", payload, f.Type)
		}
	}
	// Frames for unknown commands are ignored; the connection stays up.
	send(protocol.TypeStdin, 99, "x")
	send(protocol.TypeSignal, 99, `{"signal":9}`)
	// A running id cannot be reused.
	send(protocol.TypeExec, 8, `{"args":["sleep","10"],"open_stdin":true}`)
	if f := next(t, frames); f.Type != protocol.TypeStarted || f.ID != 8 {
		t.Fatalf("exec answered with %v %d %q", f.Type, f.ID, f.Payload)
	}
	send(protocol.TypeExec, 8, `{"args":["true"]}`)
	if f := next(t, frames); f.Type != protocol.TypeError || f.ID != 8 {
		t.Fatalf("duplicate id answered with %v", f.Type)
	}
	// An out-of-range signal is ignored; SIGKILL ends the command.
	send(protocol.TypeSignal, 8, `{"signal":1000}`)
	send(protocol.TypeSignal, 8, `{"signal":9}`)
	f := next(t, frames)
	if f.Type != protocol.TypeExit || f.ID != 8 {
		t.Fatalf("got %v %d", f.Type, f.ID)
	}
	var e protocol.Exit
	must(t, protocol.Decode(f.Payload, &e))
	if e.Signal != int(syscall.SIGKILL) || e.ExitCode != -1 || e.TimedOut {
		t.Fatalf("exit %+v", e)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "myprog")
	must(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "noexec"), []byte(""), 0o644))
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"myprog", []string{"PATH=/nope:" + dir}, prog},
		{"myprog", []string{"PATH=" + dir, "PATH=/nope"}, "myprog"},
		{"noexec", []string{"PATH=" + dir}, "noexec"},
		{"./myprog", []string{"PATH=" + dir}, "./myprog"},
		{"myprog", []string{"PATH=relative"}, "myprog"},
	}
	for _, tt := range tests {
		if got := lookPath(tt.name, tt.env); got != tt.want {
			t.Errorf("lookPath(%q, %q) = %q, want %q", tt.name, tt.env, got, tt.want)
		}
	}
}

// TestExitReportsCPUTime checks that the Exit frame carries the CPU time of
// the command and of the children it waited for, and no CPU time for a
// command that only sleeps.
func TestExitReportsCPUTime(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		min, max time.Duration
	}{
		// The child burns 0.5 s of its own CPU time, however loaded the
		// machine is (a wall-clock loop got less than that under load).
		{"busy loop in a waited-for child", `python3 -c 'import time
while time.process_time() < 0.5: pass'; exit 0`, 450 * time.Millisecond, 5 * time.Second},
		{"sleep", `sleep 0.3`, 0, 150 * time.Millisecond},
	}
	w, frames := inProcess(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := uint32(20 + i)
			req, err := json.Marshal(protocol.Exec{Args: []string{"sh", "-c", tt.script}})
			must(t, err)
			must(t, protocol.WriteFrame(w, protocol.TypeExec, id, req))
			for {
				f := next(t, frames)
				if f.ID != id || f.Type != protocol.TypeExit {
					if f.Type == protocol.TypeError {
						t.Fatalf("exec failed: %s", f.Payload)
					}
					continue
				}
				var e protocol.Exit
				must(t, protocol.Decode(f.Payload, &e))
				cpu := time.Duration(e.CPUMillis) * time.Millisecond
				if e.ExitCode != 0 || cpu < tt.min || cpu > tt.max {
					t.Fatalf("exit %+v: cpu %v, want [%v, %v]", e, cpu, tt.min, tt.max)
				}
				return
			}
		})
	}
}

// A microVM's agent sets itself up before the guest's init runs, and so
// before a template's init holds to be saved: no copy restored from the
// template sets it up again. A failed setup runs no init.
func TestStartVMSetsUpBeforeInit(t *testing.T) {
	var steps []string
	a, code := startVM(func() (*agent, int) {
		steps = append(steps, "set up")
		return &agent{}, 0
	}, func(*agent) error {
		steps = append(steps, "init")
		return nil
	})
	if a == nil || code != 0 || strings.Join(steps, ", ") != "set up, init" {
		t.Fatalf("steps %q, agent %v, code %d; want set up, then init", steps, a, code)
	}
	steps = nil
	if a, code := startVM(func() (*agent, int) { steps = append(steps, "set up"); return nil, 2 },
		func(*agent) error { steps = append(steps, "init"); return nil }); a != nil || code != 2 || len(steps) != 1 {
		t.Fatalf("a failed setup: steps %q, agent %v, code %d", steps, a, code)
	}
}
