package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

// hostPython is a Sandbox whose long-lived commands run on this host (a
// Python interpreter of the real driver), in a folder of the test.
type hostPython struct {
	fakeSandbox
	dir string
}

func (h *hostPython) Start(_ context.Context, _ string, cmd sandbox.Command, _ *sandbox.TTY) (sandbox.Session, error) {
	if cmd.Attach {
		return nil, sandbox.ErrNoSession
	}
	c := exec.Command(cmd.Args[0], cmd.Args[1:]...)
	c.Dir = h.dir
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	s := &hostSession{c: c, in: in, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, stream := range []sandbox.Stream{sandbox.Stdout, sandbox.Stderr} {
		r, err := pipe(c, stream)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			buf := make([]byte, 4096)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					cmd.Output(stream, append([]byte(nil), buf[:n]...))
				}
				if err != nil {
					return
				}
			}
		})
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	go func() {
		wg.Wait() // all output is delivered before the end is seen
		s.err = c.Wait()
		close(s.done)
	}()
	return s, nil
}

func pipe(c *exec.Cmd, s sandbox.Stream) (io.Reader, error) {
	if s == sandbox.Stderr {
		return c.StderrPipe()
	}
	return c.StdoutPipe()
}

// hostSession is a process of hostPython.
type hostSession struct {
	c    *exec.Cmd
	in   io.WriteCloser
	done chan struct{}
	err  error
}

func (s *hostSession) PID() int                    { return s.c.Process.Pid }
func (s *hostSession) Write(p []byte) (int, error) { return s.in.Write(p) }
func (s *hostSession) Resize(uint16, uint16) error { return nil }
func (s *hostSession) Kill() error                 { return s.c.Process.Kill() }
func (s *hostSession) Done() <-chan struct{}       { return s.done }
func (s *hostSession) Offset() int64               { return 0 }

func (s *hostSession) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
	return sandbox.Result{ExitCode: s.c.ProcessState.ExitCode()}, nil
}

// TestPythonDriverServesBothFamilies runs the real driver on this host:
// repl_execute's calls answer values, tracebacks and FINAL() with its
// helpers, code_execution's cells answer output and return codes, and the
// two keep apart interpreters in one container.
func TestPythonDriverServesBothFamilies(t *testing.T) {
	needPython3(t)
	h := &hostPython{dir: t.TempDir()}
	e := New(h, newFakeFiles(), Config{})
	t.Cleanup(func() {
		for _, py := range []*interpreters{e.cells, e.repls} {
			if p := py.slot("c1").p; p != nil {
				_ = p.sess.Kill()
				<-p.ended
			}
		}
	})
	repl := func(code string) map[string]any {
		t.Helper()
		return runSandbox(t, e, messages.ToolReplExecute, map[string]any{"code": code})
	}
	if out := repl("x = 40\nprint('set')"); out["stdout"] != "set\n" || out["value"] != nil || out["error"] != nil || out["restarted"] != true {
		t.Fatalf("first call %v", out)
	}
	if out := repl("x + 1"); out["value"] != "41" || out["restarted"] != false {
		t.Fatalf("an expression %v", out)
	}
	if out := repl("FINAL(grep('b', 'a\\nb'))"); out["final"] != "[(2, 'b')]" {
		t.Fatalf("FINAL %v", out)
	}
	if out := repl("1/0"); !strings.Contains(fmt.Sprint(out["error"]), "ZeroDivisionError") || out["stderr"] != "" {
		t.Fatalf("an exception %v", out)
	}
	r := run(t, e, messages.SubToolCodeExecution, `{"code":"print(x)"}`)
	if r.ReturnCode != 1 || !strings.HasPrefix(r.Stderr, FirstInterpreterNote) || !strings.Contains(r.Stderr, "NameError") {
		t.Fatalf("a cell saw the REPL's variables: %+v", r)
	}
	if r = run(t, e, messages.SubToolCodeExecution, `{"code":"print(6 * 7)"}`); r.Stdout != "42\n" || r.Stderr != "" || r.ReturnCode != 0 {
		t.Fatalf("a cell %+v", r)
	}
	code, expl := errorCode(repl("import os\nos._exit(3)"))
	if code != wire.CodeUnavailable || !strings.Contains(expl, "REPL ended") {
		t.Fatalf("a crash: %s %q", code, expl)
	}
	if out := repl("'x' in globals()"); out["value"] != "False" || out["restarted"] != true {
		t.Fatalf("after the crash %v", out)
	}
}

// TestPythonDriverNewCellWhilePaused: a cell paused on client tool calls
// is abandoned without an answer when a new cell comes instead of the
// results (the server that paused it is gone and another attached to the
// interpreter), and the new cell runs and answers.
func TestPythonDriverNewCellWhilePaused(t *testing.T) {
	needPython3(t)
	c := exec.Command("python3", "-u", "-c", pythonDriver)
	c.Dir = t.TempDir()
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	// next returns the next answer's id and JSON.
	next := func() (string, string) {
		t.Helper()
		for lines.Scan() {
			line := lines.Text()
			rest, ok := strings.CutPrefix(line, pyMarker)
			if !ok {
				continue
			}
			id, piece, _ := strings.Cut(rest, " ")
			if strings.HasPrefix(piece, "$ ") {
				return id, piece[2:]
			}
		}
		t.Fatalf("the driver ended: %v", lines.Err())
		return "", ""
	}
	send := func(req map[string]any) {
		t.Helper()
		b, _ := json.Marshal(req)
		if _, err := in.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"id": "c1", "code": "x = 41\nawait ask(q=1)\nprint('resumed')", "tools": []map[string]any{{"name": "ask", "input_schema": map[string]any{}, "allowed": []string{"code_execution_20260120"}}}, "caller": "code_execution_20260120"})
	if id, a := next(); id != "c1" || !strings.Contains(a, `"calls"`) {
		t.Fatalf("first answer %s %s, want the pause of c1", id, a)
	}
	send(map[string]any{"id": "c2", "code": "print(x + 1)"})
	id, a := next()
	if id != "c2" || !strings.Contains(a, `"stdout": "42\n"`) {
		t.Fatalf("answer %s %s, want c2's (c1 abandoned unanswered)", id, a)
	}
}

// TestPythonDriverResumeByCallIDs: the real driver names each pending call
// after its cell, so that a server that did not pause the cell can resume
// it, and answers results sent by an attaching server for a cell that is
// not paused instead of leaving it waiting.
func TestPythonDriverResumeByCallIDs(t *testing.T) {
	needPython3(t)
	c := exec.Command("python3", "-u", "-c", pythonDriver)
	c.Dir = t.TempDir()
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() (string, pythonAnswer) {
		t.Helper()
		for lines.Scan() {
			rest, ok := strings.CutPrefix(lines.Text(), pyMarker)
			if !ok {
				continue
			}
			id, piece, _ := strings.Cut(rest, " ")
			if js, ok := strings.CutPrefix(piece, "$ "); ok {
				var a pythonAnswer
				if err := json.Unmarshal([]byte(js), &a); err != nil {
					t.Fatalf("answer %s: %v", js, err)
				}
				return id, a
			}
		}
		t.Fatalf("the driver ended: %v", lines.Err())
		return "", pythonAnswer{}
	}
	send := func(req map[string]any) {
		t.Helper()
		b, _ := json.Marshal(req)
		if _, err := in.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"id": "CELL1", "code": "x = 41\nr = await ask(q=1)\nprint(r + x)", "tools": []map[string]any{{"name": "ask", "input_schema": map[string]any{}, "allowed": true}}, "caller": "code_execution_20260120"})
	id, a := next()
	if id != "CELL1" || len(a.Calls) != 1 || pausedCell([]messages.ToolAnswer{{ToolUseID: a.Calls[0].ID}}) != "CELL1" {
		t.Fatalf("pause %s %+v, want a call id naming CELL1", id, a)
	}
	send(map[string]any{"id": "CELL1", "attached": true, "results": []map[string]any{{"tool_use_id": a.Calls[0].ID, "content": "1"}}})
	if id, a = next(); id != "CELL1" || a.Stdout != "42\n" {
		t.Fatalf("resumed %s %+v, want CELL1 printing 42", id, a)
	}
	send(map[string]any{"id": "CELL9", "attached": true, "results": []map[string]any{{"tool_use_id": "toolu_CELL9_00", "content": "1"}}})
	if id, a = next(); id != "CELL9" || !a.NotPaused {
		t.Fatalf("results for a cell not paused: %s %+v, want not_paused", id, a)
	}
}

// needPython3 skips a test of the real driver where the host has no
// python3, and fails it under CI=true, where .ci/run installs python3.
func needPython3(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 is missing (apt-get install python3): %v", err)
		}
		t.Skipf("python3 is not installed: %v", err)
	}
}
