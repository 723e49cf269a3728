package boxes

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

// opsAgent answers Exec with res and err; an Exec that fails ends the
// sandbox when dies is set, as a sandbox killed under its command does.
type opsAgent struct {
	res   sandbox.Result
	err   error
	box   *opsBox
	dies  bool
	done  chan struct{}
	pings error
	block bool // Ping waits for its context's end
}

func (a *opsAgent) Exec(context.Context, sandbox.Command) (sandbox.Result, error) {
	if a.err != nil && a.dies {
		close(a.box.done)
	}
	a.box.kills += a.box.killsPerExec
	return a.res, a.err
}
func (a *opsAgent) Ping(ctx context.Context) error {
	if a.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return a.pings
}
func (a *opsAgent) Session(context.Context, sandbox.Command, *sandbox.TTY) (sandbox.Session, error) {
	return nil, errors.New("no sessions here")
}
func (a *opsAgent) Listen(context.Context, string) (*agent.Listener, error) {
	return nil, errors.New("no listeners here")
}
func (a *opsAgent) Done() <-chan struct{} { return a.done }

type opsBox struct {
	a            *opsAgent
	agent        Agent // answers in a's place when set
	done         chan struct{}
	kills        int64
	killsPerExec int64
	counted      bool
	why          string
}

func (b *opsBox) Agent() Agent {
	if b.agent != nil {
		return b.agent
	}
	return b.a
}
func (b *opsBox) Done() <-chan struct{}   { return b.done }
func (b *opsBox) StartedAt() time.Time    { return time.Unix(1, 0) }
func (b *opsBox) OOMKills() (int64, bool) { return b.kills, b.counted }
func (b *opsBox) Why() string             { return b.why }
func (b *opsBox) Kill()                   {}
func (b *opsBox) CPUTime(context.Context) (time.Duration, error) {
	if !b.counted {
		return 0, ErrCPUNotCounted
	}
	return time.Second, nil
}

func TestExec(t *testing.T) {
	boom := errors.New("connection lost")
	for _, tc := range []struct {
		name         string
		put, known   bool
		res          sandbox.Result
		err          error
		dies         bool
		killsPerExec int64
		counted      bool
		why          string
		wantIs       error
		wantText     string
		wantOOM      bool
		ooms         int // times the error says "out of memory"
	}{
		{name: "never booted", wantIs: sandbox.ErrNotFound},
		{name: "stopped", known: true, wantIs: sandbox.ErrUnavailable, wantText: "not running"},
		{name: "success", put: true, res: sandbox.Result{ExitCode: 0}},
		{name: "killed for memory", put: true, res: sandbox.Result{ExitCode: 137}, killsPerExec: 1, counted: true, wantOOM: true},
		{name: "kills not counted", put: true, res: sandbox.Result{ExitCode: 137}, killsPerExec: 1},
		{name: "failed, no kill", put: true, res: sandbox.Result{ExitCode: 1}, counted: true},
		{name: "sandbox died under it", put: true, err: boom, dies: true, why: "pod deleted", wantIs: sandbox.ErrUnavailable, wantText: "sandbox ended: pod deleted"},
		{name: "sandbox died of memory under it", put: true, err: boom, dies: true, killsPerExec: 1, counted: true, why: "container ended (exit code 137)", wantIs: sandbox.ErrUnavailable, wantText: "sandbox ended: out of memory (the sandbox's memory limit was reached and the kernel killed it): container ended (exit code 137)", ooms: 1},
		{name: "sandbox died otherwise after an earlier kill", put: true, err: boom, dies: true, counted: true, why: "container ended (exit code 137)", wantIs: sandbox.ErrUnavailable, wantText: "sandbox ended: container ended (exit code 137)"},
		{name: "the backend says out of memory", put: true, err: boom, dies: true, killsPerExec: 1, counted: true, why: "container ended (out of memory, exit code 137)", wantIs: sandbox.ErrUnavailable, wantText: "sandbox ended: container ended (out of memory, exit code 137)", ooms: 1},
		{name: "error, sandbox lives", put: true, err: boom, wantIs: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New[*opsBox]("test", slog.New(slog.DiscardHandler))
			bx := &opsBox{done: make(chan struct{}), kills: 1, killsPerExec: tc.killsPerExec, counted: tc.counted, why: tc.why}
			bx.a = &opsAgent{res: tc.res, err: tc.err, box: bx, dies: tc.dies, done: make(chan struct{})}
			if tc.put || tc.known {
				s.Put("a", bx)
			}
			if tc.known {
				s.Take("a")
			}
			res, err := NewOps(s, nil).Exec(context.Background(), "a", sandbox.Command{})
			if tc.wantIs == nil && err != nil || tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Fatalf("err %v, want %v", err, tc.wantIs)
			}
			if err != nil && (!strings.HasPrefix(err.Error(), "test: exec a: ") || !strings.Contains(err.Error(), tc.wantText)) {
				t.Errorf("err %q, want it to say %q", err, tc.wantText)
			}
			if err != nil && strings.Count(err.Error(), "out of memory") != tc.ooms {
				t.Errorf("err %q says out of memory %d times, want %d", err, strings.Count(err.Error(), "out of memory"), tc.ooms)
			}
			if res.OOMKilled != tc.wantOOM {
				t.Errorf("OOMKilled %v, want %v", res.OOMKilled, tc.wantOOM)
			}
		})
	}
}

func TestExecAsksMissing(t *testing.T) {
	s := New[*opsBox]("test", slog.New(slog.DiscardHandler))
	for _, missing := range []bool{true, false} {
		_, err := NewOps(s, func(context.Context, string) bool { return missing }).Exec(context.Background(), "a", sandbox.Command{})
		if errors.Is(err, sandbox.ErrNotFound) != missing || errors.Is(err, sandbox.ErrUnavailable) == missing {
			t.Errorf("missing %v: %v", missing, err)
		}
	}
}

func TestSessionsStatusAndNotRunning(t *testing.T) {
	ctx := context.Background()
	s := New[*opsBox]("test", slog.New(slog.DiscardHandler))
	o := NewOps(s, nil)
	if st, _ := o.Status(ctx, "a"); st.State != sandbox.StateMissing {
		t.Errorf("before a boot: %+v", st)
	}
	if _, err := o.Start(ctx, "a", sandbox.Command{}, nil); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("start without a sandbox: %v", err)
	}
	if _, err := o.Listen(ctx, "a", "127.0.0.1:1"); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("listen without a sandbox: %v", err)
	}
	bx := &opsBox{done: make(chan struct{})}
	bx.a = &opsAgent{box: bx, done: make(chan struct{})}
	s.Put("a", bx)
	if st, _ := o.Status(ctx, "a"); st.State != sandbox.StateRunning || !st.StartedAt.Equal(time.Unix(1, 0)) {
		t.Errorf("running: %+v", st)
	}
	if _, err := o.Start(ctx, "a", sandbox.Command{}, nil); err == nil || !strings.Contains(err.Error(), "test: start in a: no sessions here") {
		t.Errorf("start: %v", err)
	}
	if _, err := o.Listen(ctx, "a", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "test: listen in a: no listeners here") {
		t.Errorf("listen: %v", err)
	}
	if _, err := o.SandboxCPU(ctx, "a"); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("cpu not counted: %v", err)
	}
	bx.counted = true
	if d, err := o.SandboxCPU(ctx, "a"); d != time.Second || err != nil {
		t.Errorf("cpu: %v %v", d, err)
	}
	close(bx.done)
	if _, err := o.SandboxCPU(ctx, "a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("cpu of a stopped sandbox: %v", err)
	}
	if st, _ := o.Status(ctx, "a"); st.State != sandbox.StateStopped {
		t.Errorf("after its end: %+v", st)
	}
}

func TestHandshake(t *testing.T) {
	ended := make(chan struct{})
	close(ended)
	for _, tc := range []struct {
		name    string
		a       *opsAgent
		timeout time.Duration
		done    chan struct{}
		want    string
	}{
		{"answers", &opsAgent{}, time.Minute, make(chan struct{}), ""},
		{"fails", &opsAgent{pings: errors.New("bad hello")}, time.Minute, make(chan struct{}), "agent handshake: bad hello"},
		{"no answer in time", &opsAgent{block: true}, time.Millisecond, make(chan struct{}), "agent handshake: context deadline exceeded"},
		{"sandbox ended", &opsAgent{block: true}, time.Minute, ended, "agent handshake: the sandbox ended during boot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errText(Handshake(context.Background(), tc.timeout, tc.a, tc.done)); got != tc.want {
				t.Errorf("err %q, want %q", got, tc.want)
			}
		})
	}
}

func TestChecks(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	plain := filepath.Join(dir, "plain")
	rootfs := filepath.Join(dir, "rootfs")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{bin, 0o755}, {plain, 0o644}, {filepath.Join(rootfs, "bin", "bash"), 0o755}} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, nil, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"agent", CheckAgentBin(bin), ""},
		{"agent unset", CheckAgentBin(""), "no agent binary configured"},
		{"agent missing", CheckAgentBin(filepath.Join(dir, "none")), "agent binary (build it with `make agent`)"},
		{"agent not executable", CheckAgentBin(plain), "is not executable"},
		{"rootfs", CheckRootFS(rootfs), ""},
		{"rootfs unset", CheckRootFS(""), "no root filesystem"},
		{"rootfs without bash", CheckRootFS(dir), "has no /bin/bash"},
	} {
		if got := errText(tc.err); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFilesOnly(t *testing.T) {
	f := KeepsFilesOnly("test", "files only: no runtime state here")
	ctx := context.Background()
	if got := f.Checkpoints(ctx); got.Err() == nil || !strings.Contains(got.Err().Error(), "no runtime state here") {
		t.Errorf("checkpoints: %+v", got)
	}
	for _, err := range []error{f.Checkpoint(ctx, "a", "/x"), f.Restore(ctx, sandbox.Spec{ID: "a"}, "/x")} {
		if err == nil || !strings.HasPrefix(err.Error(), "test: ") {
			t.Errorf("checkpoint or restore: %v", err)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
