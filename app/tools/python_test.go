package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// pyRequest is a request the driver reads.
type pyRequest struct {
	ID          string            `json:"id"`
	Code        string            `json:"code"`
	Env         map[string]string `json:"env"`
	CellTimeout float64           `json:"cell_timeout"`
	OutputsDir  string            `json:"outputs_dir"`
	// Programmatic tool calling: the cell's tools, and the messages that
	// answer a paused cell.
	Tools   []messages.CodeTool   `json:"tools"`
	Results []messages.ToolAnswer `json:"results"`
	Cancel  string                `json:"cancel"`
}

// pyReply is how the fake driver answers one cell.
type pyReply struct {
	raw    string          // written straight to stdout before the answer, as a subprocess would
	answer *pythonAnswer   // nil: no answer
	exit   *int            // the interpreter ends with this code instead of answering
	lose   bool            // the sandbox goes away: Wait fails, Done stays open
	after  <-chan struct{} // when set, nothing comes until it is closed
}

// fakePython is a Sandbox with sessions whose sessions play the driver:
// each cell is answered by reply.
type fakePython struct {
	fakeSandbox
	mu       sync.Mutex
	starts   int
	sessions []*fakePySession
	stopped  bool // as after an idle stop: the next use boots a new life
	life     uint64
	reply    func(req pyRequest) pyReply
	// attach, when set, is the session a Start with Attach finds: an
	// interpreter restored with the sandbox after a restart.
	attach *fakePySession
}

// Exec boots a stopped sandbox, as the owner does: a new life.
func (f *fakePython) Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error) {
	f.mu.Lock()
	if f.stopped {
		f.stopped = false
		f.life++
	}
	f.mu.Unlock()
	return f.fakeSandbox.Exec(ctx, containerID, cmd)
}

func (f *fakePython) Start(_ context.Context, _ string, cmd sandbox.Command, _ *sandbox.TTY) (sandbox.Session, error) {
	if cmd.Attach {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.attach == nil {
			return nil, sandbox.ErrNoSession
		}
		s := f.attach
		f.attach = nil
		s.out = cmd.Output // its output goes to the attaching server from now on
		return s, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	if f.stopped {
		f.stopped = false
		f.life++
	}
	s := &fakePySession{f: f, out: cmd.Output, done: make(chan struct{}), lost: make(chan struct{})}
	f.sessions = append(f.sessions, s)
	return s, nil
}

func (f *fakePython) Life(string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.life
}

// fakePySession is one fake driver.
type fakePySession struct {
	f    *fakePython
	out  func(sandbox.Stream, []byte)
	once sync.Once
	done chan struct{}
	lost chan struct{}
	code int
	reqs []pyRequest
}

func (s *fakePySession) PID() int                 { return 1 }
func (s *fakePySession) Resize(_, _ uint16) error { return nil }
func (s *fakePySession) Done() <-chan struct{}    { return s.done }
func (s *fakePySession) Offset() int64            { return 0 }
func (s *fakePySession) Kill() error              { s.end(137); return nil }
func (s *fakePySession) end(code int)             { s.once.Do(func() { s.code = code; close(s.done) }) }
func (s *fakePySession) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *fakePySession) Wait(context.Context) (sandbox.Result, error) {
	select {
	case <-s.done:
		return sandbox.Result{ExitCode: s.code}, nil
	case <-s.lost:
		return sandbox.Result{}, fmt.Errorf("fake session: %w", sandbox.ErrUnavailable)
	}
}

func (s *fakePySession) Write(p []byte) (int, error) {
	var req pyRequest
	if err := json.Unmarshal(p, &req); err != nil {
		return 0, err
	}
	s.f.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.f.mu.Unlock()
	r := s.f.reply(req)
	go func() {
		if r.after != nil {
			<-r.after
		}
		if r.raw != "" {
			s.out(sandbox.Stdout, []byte(r.raw))
		}
		switch {
		case r.lose:
			close(s.lost)
		case r.exit != nil:
			s.end(*r.exit)
		case r.answer != nil:
			a := *r.answer
			a.ID = req.ID
			// In pieces of 16 bytes, each line in two chunks: the answer
			// may arrive split anywhere.
			for _, line := range strings.SplitAfter(answerLines(a, 16), "\n") {
				h := len(line) / 2
				s.out(sandbox.Stdout, []byte(line[:h]))
				s.out(sandbox.Stdout, []byte(line[h:]))
			}
		}
	}()
	return len(p), nil
}

func newPython(t *testing.T, reply func(pyRequest) pyReply, cfg Config) (*Executor, *fakePython) {
	t.Helper()
	f := &fakePython{reply: reply}
	return New(f, newFakeFiles(), cfg), f
}

func answer(a pythonAnswer) pyReply { return pyReply{answer: &a} }

func TestPythonResults(t *testing.T) {
	three := 3
	tests := []struct {
		name  string
		reply pyReply
		check func(t *testing.T, r *wire.ToolResult)
	}{
		{"output and return code", answer(pythonAnswer{Stdout: "42\n", Stderr: "warn\n", ReturnCode: 1}), func(t *testing.T, r *wire.ToolResult) {
			if r.Stdout != "42\n" || r.Stderr != FirstInterpreterNote+"warn\n" || r.ReturnCode != 1 {
				t.Fatalf("%+v", r)
			}
		}},
		{"subprocess output first", pyReply{raw: "from ls\n", answer: &pythonAnswer{Stdout: "from print\n"}}, func(t *testing.T, r *wire.ToolResult) {
			if r.Stdout != "from ls\nfrom print\n" {
				t.Fatalf("stdout %q", r.Stdout)
			}
		}},
		{"cell over its limit", answer(pythonAnswer{Stdout: "start\n", TimedOut: true, ReturnCode: 124}), func(t *testing.T, r *wire.ToolResult) {
			if r.Type != wire.ResultCodeExecution || r.ReturnCode != cellTimeoutCode || r.Stdout != "start\n" ||
				!strings.Contains(r.Stderr, "detection_timeout: the cell ran longer than its 90s wall-clock limit") {
				t.Fatalf("%+v", r)
			}
		}},
		{"output files", answer(pythonAnswer{Files: []string{"/mnt/user-data/outputs/a.csv"}}), func(t *testing.T, r *wire.ToolResult) {
			want := wire.OutputFile{Type: wire.ResultCodeExecutionOutput, FileID: file.EncodeID("/mnt/user-data/outputs/a.csv")}
			if len(r.Files) != 1 || r.Files[0] != want {
				t.Fatalf("files %+v", r.Files)
			}
		}},
		{"interpreter ends in the cell", pyReply{raw: "bye\n", exit: &three}, func(t *testing.T, r *wire.ToolResult) {
			if r.Type != wire.ResultCodeExecution || r.ReturnCode != 3 || r.Stdout != "bye\n" || !strings.Contains(r.Stderr, "The Python interpreter ended during this cell") {
				t.Fatalf("%+v", r)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, f := newPython(t, func(pyRequest) pyReply { return tc.reply }, Config{})
			r := run(t, e, messages.SubToolCodeExecution, `{"code":"print(42)"}`)
			tc.check(t, r)
			if req := f.sessions[0].reqs[0]; req.Code != "print(42)" || req.CellTimeout != 90 || req.OutputsDir != sandbox.OutputsDir {
				t.Fatalf("request %+v", req)
			}
		})
	}
}

func TestPythonInterpreterLifetime(t *testing.T) {
	ok := func(pyRequest) pyReply { return answer(pythonAnswer{Stdout: "ok\n"}) }
	tests := []struct {
		name    string
		between func(f *fakePython)
		fresh   bool // the second cell runs in a new interpreter
	}{
		{"kept between calls", func(*fakePython) {}, false},
		{"sandbox stopped (idle or restart)", func(f *fakePython) { f.mu.Lock(); f.stopped = true; f.mu.Unlock() }, true},
		{"interpreter died", func(f *fakePython) { f.sessions[0].end(1) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, f := newPython(t, ok, Config{})
			if r := run(t, e, messages.SubToolCodeExecution, `{"code":"x = 41"}`); r.Stderr != FirstInterpreterNote {
				t.Fatalf("first cell %+v", r)
			}
			tc.between(f)
			r := run(t, e, messages.SubToolCodeExecution, `{"code":"print(x)"}`)
			if tc.fresh {
				if f.starts != 2 || r.Stderr != NewInterpreterNote || f.sessions[0].alive() {
					t.Fatalf("starts %d, stderr %q, old alive %v", f.starts, r.Stderr, f.sessions[0].alive())
				}
				return
			}
			if f.starts != 1 || r.Stderr != "" || len(f.sessions[0].reqs) != 2 {
				t.Fatalf("starts %d, stderr %q", f.starts, r.Stderr)
			}
			// The cell marked the sandbox in use.
			if len(f.cmds) != 1 || f.cmds[0].Args[0] != "true" {
				t.Fatalf("sandbox commands %+v", f.cmds)
			}
		})
	}
}

func TestPythonCallOverTimeLimit(t *testing.T) {
	e, f := newPython(t, func(req pyRequest) pyReply {
		if req.Code == "stuck()" {
			return pyReply{} // never answers, as C code Python cannot interrupt
		}
		return answer(pythonAnswer{Stdout: "ok\n"})
	}, Config{CellTimeout: 20 * time.Millisecond, PythonTimeout: 100 * time.Millisecond})
	r := run(t, e, messages.SubToolCodeExecution, `{"code":"stuck()"}`)
	wantError(t, r, wire.ResultCodeExecutionError, wire.CodeExecutionTimeExceeded, "")
	if f.sessions[0].alive() {
		t.Fatal("the stuck interpreter was not killed")
	}
	r = run(t, e, messages.SubToolCodeExecution, `{"code":"print(1)"}`)
	if r.Stdout != "ok\n" || r.Stderr != NewInterpreterNote || f.starts != 2 {
		t.Fatalf("next cell %+v after %d starts", r, f.starts)
	}
}

func TestPythonRefusals(t *testing.T) {
	ok := func(pyRequest) pyReply { return answer(pythonAnswer{}) }
	withSessions, _ := newPython(t, ok, Config{})
	tests := []struct {
		name  string
		e     *Executor
		input string
		code  string
		text  string
	}{
		{"no code", withSessions, `{}`, wire.CodeInvalidToolInput, "Invalid input: 'code' is required."},
		{"code not a string", withSessions, `{"code":1}`, wire.CodeInvalidToolInput, "Invalid input: 'code' must be of type string."},
		{"backend without sessions", New(&fakeSandbox{}, newFakeFiles(), Config{}), `{"code":"1"}`, wire.CodeUnavailable, noSessionsMessage},
		{"no sandbox", New(nil, nil, Config{}), `{"code":"1"}`, wire.CodeUnavailable, messages.NotConfiguredMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.e, messages.SubToolCodeExecution, tc.input)
			wantError(t, r, wire.ResultCodeExecutionError, tc.code, tc.text)
		})
	}
}

// TestPythonClientGoneMidCell: a client that goes while its cell runs
// does not end the interpreter: the cell runs to its end, and the next
// cell runs after it in the same interpreter, with its variables.
func TestPythonClientGoneMidCell(t *testing.T) {
	release := make(chan struct{})
	e, f := newPython(t, func(req pyRequest) pyReply {
		if req.Code == "slow()" {
			return pyReply{answer: &pythonAnswer{Stdout: "slow done\n"}, after: release}
		}
		return answer(pythonAnswer{Stdout: "41\n"})
	}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := e.Execute(ctx, call(messages.SubToolCodeExecution, `{"code":"slow()"}`))
		gone <- err
	}()
	for sent := false; !sent; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		sent = len(f.sessions) == 1 && len(f.sessions[0].reqs) == 1
		f.mu.Unlock()
	}
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call whose client went: %v, want its context's end", err)
	}
	if !f.sessions[0].alive() {
		t.Fatal("the interpreter ended with its client")
	}
	next := make(chan *wire.ToolResult, 1)
	go func() { next <- run(t, e, messages.SubToolCodeExecution, `{"code":"print(x)"}`) }()
	close(release) // the cell ends, and gives the interpreter's turn back
	r := <-next
	if r.Stdout != "41\n" || strings.Contains(r.Stderr, "[threadbox]") || f.starts != 1 {
		t.Fatalf("next cell %+v after %d starts: want the same interpreter", r, f.starts)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if reqs := f.sessions[0].reqs; len(reqs) != 2 || reqs[1].Code != "print(x)" {
		t.Fatalf("the interpreter was asked %+v", reqs)
	}
}

func TestPythonSandboxGoneInACell(t *testing.T) {
	e, f := newPython(t, func(req pyRequest) pyReply {
		if req.Code == "lost()" {
			return pyReply{lose: true}
		}
		return answer(pythonAnswer{Stdout: "ok\n"})
	}, Config{})
	r := run(t, e, messages.SubToolCodeExecution, `{"code":"lost()"}`)
	wantError(t, r, wire.ResultCodeExecutionError, wire.CodeUnavailable, "")
	if !strings.HasPrefix(r.Detail.Explanation, "The sandbox is unavailable: ") {
		t.Fatalf("explanation %q", r.Detail.Explanation)
	}
	r = run(t, e, messages.SubToolCodeExecution, `{"code":"print(1)"}`)
	if r.Stdout != "ok\n" || r.Stderr != NewInterpreterNote || f.starts != 2 {
		t.Fatalf("next cell %+v after %d starts", r, f.starts)
	}
}

func TestPythonCellWaitsForTheOneBefore(t *testing.T) {
	e, f := newPython(t, func(req pyRequest) pyReply {
		if req.Code == "stuck()" {
			return pyReply{}
		}
		return answer(pythonAnswer{Stdout: "ok\n"})
	}, Config{CellTimeout: 20 * time.Millisecond, PythonTimeout: 200 * time.Millisecond})
	first := make(chan *wire.ToolResult)
	go func() {
		r, _ := e.Execute(context.Background(), call(messages.SubToolCodeExecution, `{"code":"stuck()"}`))
		first <- r
	}()
	for sent := false; !sent; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		sent = len(f.sessions) == 1 && len(f.sessions[0].reqs) == 1
		f.mu.Unlock()
	}
	// The second cell waits for the stuck one, whose time limit ends its
	// interpreter, then runs in a new one.
	second := run(t, e, messages.SubToolCodeExecution, `{"code":"print(1)"}`)
	if r := <-first; r.Type != wire.ResultCodeExecutionError || r.ErrorCode != wire.CodeExecutionTimeExceeded {
		t.Fatalf("stuck cell %+v", r)
	}
	if second.Stdout != "ok\n" || second.Stderr != NewInterpreterNote || f.starts != 2 {
		t.Fatalf("second cell %+v after %d starts", second, f.starts)
	}
}
