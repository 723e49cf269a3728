package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

// Messages of the code_execution sub-tool.
const (
	// NewInterpreterNote starts the stderr of a cell that ran in a fresh
	// interpreter of a container whose earlier interpreter ended.
	NewInterpreterNote = "[threadbox] A new Python interpreter started: the previous one ended (its sandbox stopped or restarted, or the interpreter itself ended), so variables, imports and open objects of earlier cells are gone; files stay.\n"
	// FirstInterpreterNote starts the stderr of the first cell this server
	// ran for a container.
	FirstInterpreterNote = "[threadbox] A new Python interpreter started.\n"
	// DetectionTimeout names the status of a cell stopped at its limit.
	DetectionTimeout = "detection_timeout"
	// cellTimeoutCode is the return code of a cell stopped at its limit
	// (timeout(1)'s, as bash_code_execution's timed-out commands).
	cellTimeoutCode = 124
)

// interpreterNotes are the notes a cell's stderr starts with, by where its
// interpreter came from.
var interpreterNotes = map[origin]string{first: FirstInterpreterNote, replaced: NewInterpreterNote}

// pythonInput is the input of code_execution.
type pythonInput struct {
	Code *string `json:"code"`
}

// python runs one cell of the code_execution sub-tool.
func (e *Executor) python(ctx context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	if call.Resume != nil {
		return e.resume(ctx, call)
	}
	var in pythonInput
	if err := decodeInput(call.Input, &in); err != nil {
		return nil, err
	}
	if in.Code == nil {
		return nil, invalidInput("Invalid input: 'code' is required.")
	}
	started := time.Now()
	p, from, err := e.takeTurn(ctx, e.cells, call)
	if err != nil {
		return nil, err
	}
	end := e.begin(ctx, call.ContainerID)
	codeTools := call.CodeTools
	if codeTools == nil {
		codeTools = []messages.CodeTool{}
	}
	ans, cell, err := e.ask(ctx, call, p, *in.Code, map[string]any{
		"cell_timeout": e.cfg.CellTimeout.Seconds(), "outputs_dir": sandbox.OutputsDir,
		"tools": codeTools, "caller": call.CallerType, "tool_timeout": e.cfg.ToolResultTimeout.Seconds(),
	}, e.cfg.PythonTimeout)
	return e.cellResult(ctx, call, p, &cellRun{callID: call.ID, cell: cell, note: interpreterNotes[from], started: started, end: end}, ans, err)
}

// resume gives a paused cell the client's results of its tool calls and
// waits for it to end or pause again. A cell that is not paused here (its
// sandbox stopped, this server restarted, or the request reached another
// server) answers unavailable, saying so.
func (e *Executor) resume(ctx context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	gone := func(why string) error {
		return refuse(wire.CodeUnavailable, "The code of %s is no longer paused on this server, so the tool results cannot resume it: %s. Run the code again.", call.ID, why)
	}
	const (
		stopped  = "its sandbox stopped (idle shutdown or restart), and its Python interpreter with it"
		unknown  = "this server has not run the container's Python since it started (threadbox restarted, or another server ran the code)"
		replaced = "a later cell in the container abandoned it, or its results were sent already"
	)
	sl := e.cells.slot(call.ContainerID)
	sl.mu.Lock()
	p, seen := sl.p, sl.seen
	sl.mu.Unlock()
	switch {
	case p == nil && seen:
		return nil, gone(stopped)
	case p == nil:
		// This server has not run the container's Python: after a restart
		// or a hand-over, the interpreter restored with its sandbox may
		// still be paused on these calls.
		return e.resumeAttached(ctx, call, func() error { return gone(unknown) })
	}
	p.mu.Lock()
	pc := p.paused
	if pc == nil || pc.callID != call.ID {
		p.mu.Unlock()
		if !p.alive() {
			return nil, gone(stopped)
		}
		return nil, gone(replaced)
	}
	p.paused = nil
	late := pc.cell.answer // the cell went on alone (its wait timed out)
	if late == nil {
		p.cell = pc.cell
	}
	p.mu.Unlock()
	// The pause's turn is this call's now.
	if late != nil {
		p.mu.Lock()
		p.cell = nil
		p.mu.Unlock()
		return e.cellResult(ctx, call, p, pc, late, nil)
	}
	if current, err := e.current(ctx, call.ContainerID, p); err != nil || !current {
		e.drop(p)
		e.endPaused(p, pc)
		<-p.turn
		return nil, gone(stopped)
	}
	answers := map[string]messages.ToolAnswer{}
	for _, a := range call.Resume {
		answers[a.ToolUseID] = a
	}
	results := []messages.ToolAnswer{}
	for _, c := range pc.calls {
		a, ok := answers[c.ID]
		if !ok {
			a = messages.ToolAnswer{ToolUseID: c.ID, Content: json.RawMessage(`"The client sent no tool_result for this call."`), IsError: true}
		}
		results = append(results, a)
	}
	msg, err := json.Marshal(map[string]any{"id": pc.cell.id, "results": results})
	if err != nil {
		e.endPaused(p, pc)
		<-p.turn
		return nil, refuse(wire.CodeUnavailable, "The tool results could not be encoded: %s", err.Error())
	}
	pc.started = time.Now() // the wait for the client is not the cell's time
	ans, _, err := e.wait(ctx, call, p, pc.cell, append(msg, '\n'), e.cfg.PythonTimeout)
	return e.cellResult(ctx, call, p, pc, ans, err)
}

// pausedCell returns the id of the cell whose tool calls the results
// answer: the driver names each call toolu_<cell id>_<n>. "" when the ids
// do not name one cell.
func pausedCell(answers []messages.ToolAnswer) string {
	cell := ""
	for _, a := range answers {
		rest, ok := strings.CutPrefix(a.ToolUseID, "toolu_")
		i := strings.LastIndexByte(rest, '_')
		if !ok || i <= 0 || (cell != "" && rest[:i] != cell) {
			return ""
		}
		cell = rest[:i]
	}
	return cell
}

// resumeAttached resumes a cell that another server (or this one before
// a restart) paused, in the interpreter restored with the container's
// sandbox: it attaches to that interpreter (never starting one: results
// mean nothing to a new interpreter) and sends the results to the cell
// their call ids name. Without such an interpreter it answers gone().
func (e *Executor) resumeAttached(ctx context.Context, call messages.ToolCall, gone func() error) (*wire.ToolResult, error) {
	cellID := pausedCell(call.Resume)
	if cellID == "" {
		return nil, gone()
	}
	sl := e.cells.slot(call.ContainerID)
	sl.mu.Lock()
	if sl.p != nil || sl.seen {
		sl.mu.Unlock()
		return nil, gone()
	}
	p := &interpreter{slot: sl, turn: make(chan struct{}, 1), wake: make(chan struct{}, 1), ended: make(chan struct{})}
	sess, err := e.sb.Start(ctx, call.ContainerID, sandbox.Command{
		Args: []string{"python3", "-u", "-c", pythonDriver}, Dir: sandbox.WorkspaceDir, Env: call.Env,
		Output: p.output, Tag: e.cells.tag, Attach: true,
	}, nil)
	if err != nil {
		sl.mu.Unlock()
		if errors.Is(err, sandbox.ErrNoSession) {
			return nil, gone()
		}
		return nil, fmt.Errorf("tools: attach python: %w", err)
	}
	p.sess, p.life = sess, e.sb.Life(call.ContainerID)
	go p.watch()
	sl.p, sl.seen = p, true
	sl.mu.Unlock()
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("tools: python: %w", ctx.Err())
	}
	cell := &cellOutput{id: cellID, limit: e.cfg.MaxOutput}
	p.mu.Lock()
	p.cell = cell
	p.mu.Unlock()
	pc := &cellRun{callID: call.ID, cell: cell, started: time.Now(), end: e.begin(ctx, call.ContainerID)}
	msg, err := json.Marshal(map[string]any{"id": cellID, "results": call.Resume, "attached": true})
	if err != nil {
		e.endPaused(p, pc)
		<-p.turn
		return nil, refuse(wire.CodeUnavailable, "The tool results could not be encoded: %s", err.Error())
	}
	ans, _, err := e.wait(ctx, call, p, cell, append(msg, '\n'), e.cfg.PythonTimeout)
	if err == nil && ans != nil && ans.NotPaused {
		pc.end(sandbox.Result{}, nil)
		<-p.turn
		return nil, gone()
	}
	return e.cellResult(ctx, call, p, pc, ans, err)
}

// cellResult turns a cell's answer into the call's result and gives the
// interpreter's turn back, unless the cell paused on client tool calls:
// then the pause keeps the turn, and the result lists the calls.
func (e *Executor) cellResult(ctx context.Context, call messages.ToolCall, p *interpreter, pc *cellRun, ans *pythonAnswer, err error) (*wire.ToolResult, error) {
	if errors.Is(err, errDetached) {
		// The client went: the cell runs on and keeps the turn until it
		// ends, pauses or meets its limit.
		go e.finishDetached(call, p, pc)
		return nil, err
	}
	if err == nil && ans != nil && len(ans.Calls) > 0 {
		p.mu.Lock()
		pc.calls = ans.Calls
		pc.ran += time.Since(pc.started)
		p.paused = pc
		p.mu.Unlock()
		go e.holdPaused(call.ContainerID, p, pc)
		return &wire.ToolResult{Type: wire.ResultCodeExecution, Files: []wire.OutputFile{}, Pending: ans.Calls,
			PausedUntil: time.Now().Add(e.cfg.ToolResultTimeout)}, nil
	}
	defer func() { <-p.turn }()
	note, cell := pc.note, pc.cell
	e.meterCell(p, pc, ans)
	switch {
	case errors.Is(err, errCallTimeout):
		return nil, refuse(wire.CodeExecutionTimeExceeded, "The call ran longer than %ss, where the interpreter could not interrupt it; the interpreter was stopped, so the next cell starts a new one without the earlier variables.", seconds(e.cfg.PythonTimeout))
	case err != nil:
		return nil, err
	}
	out := &wire.ToolResult{Type: wire.ResultCodeExecution, Files: []wire.OutputFile{}}
	rawOut, outCut, rawErr, errCut := cell.rest()
	if ans == nil {
		// The interpreter itself ended (os._exit, killed for memory): its
		// exit is the cell's result, and the next cell starts a new one.
		out.Stdout = messages.CapOutput(rawOut, outCut, e.cfg.MaxOutput)
		out.Stderr = note + messages.CapOutput(rawErr, errCut, e.cfg.MaxOutput)
		out.ReturnCode = p.endRes.ExitCode
		if out.ReturnCode == 0 {
			out.ReturnCode = 1
		}
		out.Stderr = joinLine(out.Stderr, "[threadbox] The Python interpreter ended during this cell; the next cell starts a new one without the earlier variables.")
		return out, nil
	}
	// What subprocesses wrote straight to the streams came first.
	out.Stdout = messages.CapOutput(append(rawOut, ans.Stdout...), outCut || ans.StdoutTruncated, e.cfg.MaxOutput)
	out.Stderr = note + messages.CapOutput(append(rawErr, ans.Stderr...), errCut || ans.StderrTruncated, e.cfg.MaxOutput)
	out.ReturnCode = ans.ReturnCode
	if ans.TimedOut {
		out.ReturnCode = cellTimeoutCode
		out.Stderr = joinLine(out.Stderr, fmt.Sprintf("%s: the cell ran longer than its %ss wall-clock limit and was stopped; the interpreter and its variables are kept.", DetectionTimeout, seconds(e.cfg.CellTimeout)))
	}
	out.Stderr = e.withEgress(out.Stderr, call.ContainerID, pc.started)
	files, err := e.outputFiles(ctx, call.ContainerID, ans.Files, wire.ResultCodeExecutionOutput)
	if err != nil {
		return nil, err
	}
	out.Files = files
	return out, nil
}

// finishDetached waits for a cell whose caller went, then settles it as
// its caller would have: metered, its output files recorded and the
// interpreter's turn given back, or kept by a pause on client tool calls
// (which then waits for results, or its timeout, as any pause does).
func (e *Executor) finishDetached(call messages.ToolCall, p *interpreter, pc *cellRun) {
	ctx := context.Background()
	ans, _, err := e.wait(ctx, call, p, pc.cell, nil, e.cfg.PythonTimeout)
	_, _ = e.cellResult(ctx, call, p, pc, ans, err)
}

// endPaused meters a paused cell that will not be resumed (abandoned, or
// ended with its interpreter): the time of its segments before the pause.
func (e *Executor) endPaused(p *interpreter, pc *cellRun) {
	p.mu.Lock()
	ran := pc.ran
	p.mu.Unlock()
	pc.end(sandbox.Result{Duration: max(ran, time.Millisecond)}, nil)
}

// holdPaused marks the sandbox of a paused cell in use, as a running
// cell's is, so that the idle sweeper does not stop it (and end the
// interpreter) while the client works on the calls: until the cell is
// resumed, abandoned or over, at most ToolResultTimeout and a minute. A
// cell still paused when its interpreter ends is metered then.
func (e *Executor) holdPaused(containerID string, p *interpreter, pc *cellRun) {
	tick := time.NewTicker(e.keepAlive())
	defer tick.Stop()
	limit := time.NewTimer(e.cfg.ToolResultTimeout + time.Minute)
	defer limit.Stop()
	held := true
	for {
		select {
		case <-tick.C:
			p.mu.Lock()
			paused, waiting := p.paused == pc, pc.cell.answer == nil
			p.mu.Unlock()
			if !paused {
				return // resumed or abandoned: metered there
			}
			if held && waiting {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				_ = e.touch(ctx, containerID)
				cancel()
			}
		case <-p.ended:
			p.mu.Lock()
			paused := p.paused == pc
			p.mu.Unlock()
			if paused {
				e.endPaused(p, pc)
			}
			return
		case <-limit.C:
			held = false
		}
	}
}

// abandonWait bounds how long a paused cell that a new cell replaces may
// take to end once told to.
const abandonWait = 10 * time.Second

// abandon ends the interpreter's paused cell, if any, before a new cell
// runs: its pending tool calls raise in its code, whatever it answers is
// dropped, and the pause's turn is given back. A cell that does not end
// in time ends with its interpreter.
func (e *Executor) abandon(p *interpreter) {
	p.mu.Lock()
	pc := p.paused
	p.paused = nil
	done := pc == nil || pc.cell.answer != nil
	p.mu.Unlock()
	if pc == nil {
		return
	}
	defer func() {
		p.mu.Lock()
		p.cell = nil
		p.mu.Unlock()
		e.endPaused(p, pc)
		<-p.turn
	}()
	if done || !p.alive() {
		return
	}
	msg, _ := json.Marshal(map[string]string{"id": pc.cell.id, "cancel": "A new cell started before the client answered this cell's tool calls, so they were abandoned."})
	if _, err := p.sess.Write(append(msg, '\n')); err != nil {
		e.drop(p)
		return
	}
	timer := time.NewTimer(abandonWait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		ended := pc.cell.answer != nil
		p.mu.Unlock()
		if ended {
			return
		}
		select {
		case <-p.wake:
		case <-p.ended:
			return
		case <-timer.C:
			e.drop(p)
			return
		}
	}
}
