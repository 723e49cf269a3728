package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

// sessionSandbox is the Sandbox port over a fakeBackend, whose sessions
// the test drives; Exec answers with execFn.
type sessionSandbox struct {
	lifeless
	backend *fakeBackend
	execFn  func(cmd sandbox.Command) (sandbox.Result, error)

	mu    sync.Mutex
	execs []sandbox.Command
}

func (f *sessionSandbox) Exec(_ context.Context, _ string, cmd sandbox.Command) (sandbox.Result, error) {
	f.mu.Lock()
	f.execs = append(f.execs, cmd)
	f.mu.Unlock()
	if f.execFn == nil {
		return sandbox.Result{}, nil
	}
	return f.execFn(cmd)
}

func (f *sessionSandbox) Start(ctx context.Context, id string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	return f.backend.Start(ctx, id, cmd, tty)
}

func (f *sessionSandbox) Restart(context.Context, string) error { return nil }

// fakeBackend starts fakeSessions.
type fakeBackend struct {
	onStart func(s *fakeSession) // runs before Start returns
	onWrite func(s *fakeSession, b []byte)

	mu      sync.Mutex
	started []*fakeSession
	nextPID int
}

func (b *fakeBackend) Start(_ context.Context, _ string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	if cmd.Attach {
		return nil, sandbox.ErrNoSession
	}
	b.mu.Lock()
	b.nextPID++
	s := &fakeSession{b: b, cmd: cmd, tty: tty, pid: 100 + b.nextPID, done: make(chan struct{})}
	b.started = append(b.started, s)
	b.mu.Unlock()
	if b.onStart != nil {
		b.onStart(s)
	}
	return s, nil
}

// fakeSession is a command the test drives: emit writes output, end ends it.
type fakeSession struct {
	b    *fakeBackend
	cmd  sandbox.Command
	tty  *sandbox.TTY
	pid  int
	done chan struct{}

	mu    sync.Mutex
	input strings.Builder
	res   sandbox.Result
	err   error
	once  sync.Once
}

func (s *fakeSession) PID() int { return s.pid }

func (s *fakeSession) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.input.Write(p)
	s.mu.Unlock()
	if s.b.onWrite != nil {
		s.b.onWrite(s, p)
	}
	return len(p), nil
}

func (s *fakeSession) Resize(uint16, uint16) error { return nil }
func (s *fakeSession) Kill() error                 { s.end(137, nil); return nil }
func (s *fakeSession) Done() <-chan struct{}       { return s.done }
func (s *fakeSession) Offset() int64               { return 0 }

func (s *fakeSession) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.err
}

func (s *fakeSession) emit(text string) { s.cmd.Output(sandbox.Stdout, []byte(text)) }

func (s *fakeSession) end(code int, err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.res, s.err = sandbox.Result{ExitCode: code}, err
		s.mu.Unlock()
		close(s.done)
	})
}

// runSandbox executes one sandbox_v1 call and returns its content object
// (or error fields).
func runSandbox(t *testing.T, e *Executor, name string, input any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(input)
	r, err := e.Execute(context.Background(), messages.ToolCall{ID: "srvtoolu_x", Name: name, Input: b, ContainerID: "c1", Env: []string{"ANTHROPIC_MODEL=m"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// errorCode returns the error code and explanation of an error result.
func errorCode(out map[string]any) (string, string) {
	if out["type"] != wire.ResultSandboxError {
		return "", ""
	}
	d, _ := out["detail"].(map[string]any)
	code, _ := out["error_code"].(string)
	expl, _ := d["explanation"].(string)
	return code, expl
}

// eventually waits for cond.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5s")
}

var errLost = errors.New("sandbox unavailable: agent connection lost")
