package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// TestPythonPauseResume plays the driver's side of programmatic tool
// calling: a cell pauses on a client call, the results resume it (and are
// what the driver gets), a new cell abandons a paused one, and results for
// a cell that is not paused say why.
func TestPythonPauseResume(t *testing.T) {
	pause := pythonAnswer{Calls: []wire.PendingCall{{ID: "toolu_1", Name: "f", Input: json.RawMessage(`{"x":1}`)}}}
	reply := func(req pyRequest) pyReply {
		switch {
		case req.Code == "pause":
			return answer(pause)
		case req.Results != nil:
			return answer(pythonAnswer{Stdout: "got " + string(req.Results[0].Content) + "\n"})
		case req.Cancel != "":
			return answer(pythonAnswer{Stderr: "ToolCallAbandoned\n", ReturnCode: 1})
		}
		return answer(pythonAnswer{Stdout: "ran " + req.Code + "\n"})
	}
	resume := func(e *Executor, id string, content string) *wire.ToolResult {
		t.Helper()
		c := call(messages.SubToolCodeExecution, `{"code":"pause"}`)
		c.ID = id
		c.Resume = []messages.ToolAnswer{{ToolUseID: "toolu_1", Content: json.RawMessage(content)}}
		r, err := e.Execute(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tools := []messages.CodeTool{{Name: "f", Allowed: true}, {Name: "g"}}
	cell := func(e *Executor, code string) *wire.ToolResult {
		t.Helper()
		c := call(messages.SubToolCodeExecution, `{"code":"`+code+`"}`)
		c.CodeTools, c.CallerType = tools, wire.ToolTypeCodeExecution2601
		r, err := e.Execute(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// metered checks that each cell was metered once, however it ended.
	metered := func(t *testing.T, m *fakeMeter, cells int) {
		t.Helper()
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.begun != cells || len(m.results) != cells || len(m.ends) != cells {
			t.Fatalf("%d cells begun, %d ended, %d counted; want %d of each", m.begun, len(m.ends), len(m.results), cells)
		}
	}

	t.Run("resumed with the results", func(t *testing.T) {
		m := &fakeMeter{}
		e, f := newPython(t, reply, Config{Meter: m})
		r := cell(e, "pause")
		if len(r.Pending) != 1 || r.Pending[0].ID != "toolu_1" || r.Pending[0].Name != "f" {
			t.Fatalf("paused result %+v", r)
		}
		req := f.sessions[0].reqs[0]
		if len(req.Tools) != 2 || !req.Tools[0].Allowed || req.Tools[1].Allowed {
			t.Fatalf("tools sent to the driver %+v", req.Tools)
		}
		r = resume(e, "srvtoolu_1", `"sunny"`)
		if len(r.Pending) != 0 || r.Stdout != `got "sunny"`+"\n" || r.Stderr != FirstInterpreterNote {
			t.Fatalf("resumed result %+v", r)
		}
		if got := f.sessions[0].reqs[1]; got.ID != req.ID || len(got.Results) != 1 || got.Results[0].ToolUseID != "toolu_1" {
			t.Fatalf("results sent %+v, want for cell %s", got, req.ID)
		}
		// The turn is free again: the next cell runs at once.
		if r := cell(e, "next"); r.Stdout != "ran next\n" {
			t.Fatalf("next cell %+v", r)
		}
		metered(t, m, 2) // the paused cell counts once, resumed
	})

	t.Run("a new cell abandons a paused one", func(t *testing.T) {
		m := &fakeMeter{}
		e, f := newPython(t, reply, Config{Meter: m})
		cell(e, "pause")
		if r := cell(e, "other"); r.Stdout != "ran other\n" {
			t.Fatalf("new cell %+v", r)
		}
		if reqs := f.sessions[0].reqs; len(reqs) != 3 || !strings.Contains(reqs[1].Cancel, "new cell started") {
			t.Fatalf("driver got %+v", reqs)
		}
		r := resume(e, "srvtoolu_1", `"late"`)
		if r.ErrorCode != wire.CodeUnavailable || !strings.Contains(r.Detail.Explanation, "a later cell in the container abandoned it") {
			t.Fatalf("results for the abandoned cell %+v %+v", r, r.Detail)
		}
		metered(t, m, 2) // the abandoned cell counts too
	})

	t.Run("results this server knows nothing of", func(t *testing.T) {
		e, _ := newPython(t, reply, Config{})
		r := resume(e, "srvtoolu_9", `"x"`)
		if r.ErrorCode != wire.CodeUnavailable || !strings.Contains(r.Detail.Explanation, "this server has not run the container's Python since it started") {
			t.Fatalf("%+v %+v", r, r.Detail)
		}
	})

	t.Run("the sandbox stopped under the pause", func(t *testing.T) {
		m := &fakeMeter{}
		e, f := newPython(t, reply, Config{Meter: m})
		cell(e, "pause")
		f.mu.Lock()
		f.stopped = true
		f.mu.Unlock()
		r := resume(e, "srvtoolu_1", `"x"`)
		if r.ErrorCode != wire.CodeUnavailable || !strings.Contains(r.Detail.Explanation, "its sandbox stopped") {
			t.Fatalf("%+v %+v", r, r.Detail)
		}
		f.mu.Lock()
		f.stopped = false
		f.mu.Unlock()
		if r := cell(e, "again"); r.Stdout != "ran again\n" || !strings.HasPrefix(r.Stderr, NewInterpreterNote) {
			t.Fatalf("cell after %+v", r)
		}
		metered(t, m, 2) // the cell whose sandbox stopped under its pause counts
	})
}

// TestPythonResumeAfterRestart: a server that did not pause a cell (this
// one after a restart, or another after a hand-over) resumes it in the
// interpreter restored with the sandbox: the call ids name the cell, the
// interpreter is attached, never started anew, and the results reach the
// paused cell. Results the interpreter has no paused cell for, and
// results with no interpreter to attach to, answer unavailable.
func TestPythonResumeAfterRestart(t *testing.T) {
	reply := func(req pyRequest) pyReply {
		switch {
		case req.Code == "pause":
			return answer(pythonAnswer{Calls: []wire.PendingCall{{ID: "toolu_" + req.ID + "_1", Name: "f", Input: json.RawMessage(`{}`)}}})
		case req.Results != nil && strings.Contains(req.Results[0].ToolUseID, "stale"):
			return answer(pythonAnswer{NotPaused: true})
		case req.Results != nil:
			return answer(pythonAnswer{Stdout: "got " + string(req.Results[0].Content) + "\n"})
		}
		return answer(pythonAnswer{Stdout: "ran\n"})
	}
	resume := func(e *Executor, toolUseID string) (*wire.ToolResult, error) {
		c := call(messages.SubToolCodeExecution, `{"code":"pause"}`)
		c.Resume = []messages.ToolAnswer{{ToolUseID: toolUseID, Content: json.RawMessage(`"sunny"`)}}
		return e.Execute(context.Background(), c)
	}
	old, f := newPython(t, reply, Config{})
	paused := run(t, old, messages.SubToolCodeExecution, `{"code":"pause"}`)
	if len(paused.Pending) != 1 || !strings.HasPrefix(paused.Pending[0].ID, "toolu_") {
		t.Fatalf("paused result %+v", paused)
	}

	// A new server without the interpreter to attach to: unavailable.
	fresh := New(f, newFakeFiles(), Config{})
	unavailable := func(r *wire.ToolResult, err error, why string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, r, wire.ResultCodeExecutionError, wire.CodeUnavailable, "")
		if !strings.Contains(r.Detail.Explanation, why) {
			t.Fatalf("explanation %q, want it to say %q", r.Detail.Explanation, why)
		}
	}
	r, err := resume(fresh, paused.Pending[0].ID)
	unavailable(r, err, "has not run the container's Python")

	// The restored interpreter, attached by a new server.
	f.mu.Lock()
	f.attach = f.sessions[0]
	f.mu.Unlock()
	next := New(f, newFakeFiles(), Config{})
	r, err = resume(next, paused.Pending[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != `got "sunny"`+"\n" || f.starts != 1 {
		t.Fatalf("resumed result %+v after %d starts: want the paused cell's end in the first interpreter", r, f.starts)
	}
	f.mu.Lock()
	got := f.sessions[0].reqs[1]
	f.mu.Unlock()
	if got.ID != f.sessions[0].reqs[0].ID || len(got.Results) != 1 {
		t.Fatalf("results sent %+v, want for the paused cell %s", got, f.sessions[0].reqs[0].ID)
	}

	// Results for a cell the attached interpreter has not paused.
	f.mu.Lock()
	f.attach = f.sessions[0]
	f.mu.Unlock()
	other := New(f, newFakeFiles(), Config{})
	r, err = resume(other, "toolu_stale_1")
	unavailable(r, err, "no longer paused")
	if r := run(t, other, messages.SubToolCodeExecution, `{"code":"print(1)"}`); r.Stdout != "ran\n" || f.starts != 1 {
		t.Fatalf("the next cell %+v after %d starts: want the attached interpreter", r, f.starts)
	}
}
