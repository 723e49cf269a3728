package tools

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// Sessions starts long-lived commands in a container's sandbox, booting it
// on demand (app/containers serves it). The code_execution sub-tool keeps
// its Python interpreter in one; a Sandbox port without it answers that
// sub-tool with unavailable.
type Sessions interface {
	Start(ctx context.Context, containerID string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error)
}

// idleReporter gives the idle period after which the sandbox's owner stops
// an unused sandbox (app/containers); a running cell marks its sandbox in
// use more often than that.
type idleReporter interface {
	Idle() time.Duration
}

// runningReporter says whether this process holds a booted sandbox of a
// container (app/containers). When the port has it, an interpreter whose
// sandbox was stopped is known to be gone before a cell is sent to it.
type runningReporter interface {
	Running(containerID string) bool
}

// lifeReporter names the life of a container's sandbox in this process
// (app/containers): a fresh boot starts a new one, and the restore of a
// checkpoint goes on with the life it saved, whose interpreter (a session
// of this process) is still there. When the port has it, an interpreter
// outlives its sandbox's idle stop where the sandbox is checkpointed.
type lifeReporter interface {
	Life(containerID string) uint64
}

// Defaults of the code_execution sub-tool.
const (
	// DefaultCellTimeout is the wall-clock limit of one Python cell: a cell
	// over it is interrupted and answers detection_timeout, the
	// interpreter kept.
	DefaultCellTimeout = 90 * time.Second
	// DefaultPythonTimeout is the limit of one whole code_execution call:
	// past it (a cell stuck where Python cannot interrupt it) the
	// interpreter is killed and the call answers execution_time_exceeded.
	DefaultPythonTimeout = 5 * time.Minute
	// DefaultToolResultTimeout is how long a cell paused on client tool
	// calls waits for the client's results: about 4.5 minutes, the life
	// Anthropic's page gives a paused container (docs/messages.md).
	DefaultToolResultTimeout = 270 * time.Second
	// keepAlive is how often a running cell marks its sandbox in use, so
	// that the idle sweeper does not stop it under the cell; more often
	// when the owner's idle period is short (a third of it).
	keepAlive = 30 * time.Second
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
	cellTimeoutCode   = 124
	noSessionsMessage = "This sandbox backend cannot keep a Python interpreter running."
)

//go:embed python_driver.py
var pythonDriver string

// pyMarker starts each line of the driver's answers.
const pyMarker = "\x00TBPY "

// interpreters keeps one Python interpreter per container. A container's
// slot stays for the process's life (a few words), so that a later
// interpreter can say an earlier one ended.
type interpreters struct {
	mu sync.Mutex
	by map[string]*slot
}

// slot is a container's place in interpreters; its lock is held while its
// interpreter is looked at or started, so a slow boot of one sandbox does
// not hold up the cells of others.
type slot struct {
	mu   sync.Mutex
	p    *interpreter
	seen bool // the container had an interpreter in this process
}

func (py *interpreters) slot(containerID string) *slot {
	py.mu.Lock()
	defer py.mu.Unlock()
	s := py.by[containerID]
	if s == nil {
		s = &slot{}
		py.by[containerID] = s
	}
	return s
}

// interpreter is one running driver.
type interpreter struct {
	sess sandbox.Session
	life uint64        // the life of the sandbox it runs in (lifeReporter)
	turn chan struct{} // one cell at a time; a buffered slot
	// ended is closed when the driver has ended or its sandbox went away
	// (a session's Done is not closed then); endRes and endErr say how.
	ended  chan struct{}
	endRes sandbox.Result
	endErr error

	// metered is the CPU time of this interpreter's cells recorded so far
	// (usage metering); its turn guards it.
	metered time.Duration

	mu   sync.Mutex
	cell *cellOutput // the running cell's output; nil between cells
	wake chan struct{}
	// paused is the cell waiting for the client's tool results
	// (programmatic tool calling); it holds the interpreter's turn.
	paused *pausedCell
}

// pausedCell is a cell whose code awaits client tool calls: the request
// that ran it answered with the calls, and a later request with the same
// container and the client's results resumes it (Executor.resume).
type pausedCell struct {
	callID  string // the code_execution call's srvtoolu_ id
	cell    *cellOutput
	calls   []messages.PendingCall
	note    string // the interpreter note of the cell's first segment
	started time.Time
	// ran is the time of the cell's segments before its last pause (the
	// client's wait is not the cell's time); the interpreter's mu guards
	// it.
	ran time.Duration
	// end meters the cell once it ended (Meter.Begin): answered, failed,
	// abandoned while paused, or ended with its interpreter.
	end func(sandbox.Result, error)
}

// meterCell records one cell for usage metering: its wall time (of all
// its segments), and its CPU time as the driver measured it (the
// interpreter's and its waited-for children's user and system time) or,
// when the interpreter ended during the cell, what the interpreter's exit
// accounting (the agent's wait4) holds beyond the cells already counted.
// The cell's turn is held.
func (e *Executor) meterCell(p *interpreter, pc *pausedCell, ans *pythonAnswer) {
	p.mu.Lock()
	ran := pc.ran
	p.mu.Unlock()
	res := sandbox.Result{Duration: ran + time.Since(pc.started)}
	if ans != nil {
		res.CPUTime = sandbox.CPUSeconds(ans.CPUSeconds)
	} else {
		// A call without an answer ended the interpreter or stopped it:
		// its exit accounting follows shortly.
		res.CPUTime = sandbox.ExitCPU(p.ended, func() (sandbox.Result, error) { return p.endRes, p.endErr }, p.metered)
	}
	p.metered += res.CPUTime
	pc.end(res, nil)
}

// endPaused meters a paused cell that will not be resumed (abandoned, or
// ended with its interpreter): the time of its segments before the pause.
func (e *Executor) endPaused(p *interpreter, pc *pausedCell) {
	p.mu.Lock()
	ran := pc.ran
	p.mu.Unlock()
	pc.end(sandbox.Result{Duration: max(ran, time.Millisecond)}, nil)
}

// output takes the driver's output: the running cell's, or (between cells,
// a thread of an earlier cell printing) nobody's, dropped.
func (p *interpreter) output(s sandbox.Stream, b []byte) {
	p.mu.Lock()
	answered := false
	if p.cell != nil {
		p.cell.write(s, b)
		answered = p.cell.answer != nil
	}
	p.mu.Unlock()
	if answered {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// watch waits for the driver's end; all its output has been delivered then.
func (p *interpreter) watch() {
	p.endRes, p.endErr = p.sess.Wait(context.Background())
	close(p.ended)
}

// alive reports whether the driver still runs: neither ended (as watch
// saw) nor reported done by its session.
func (p *interpreter) alive() bool {
	select {
	case <-p.ended:
		return false
	case <-p.sess.Done():
		return false
	default:
		return true
	}
}

// pythonInput is the input of code_execution.
type pythonInput struct {
	Code *string `json:"code"`
}

// pythonAnswer is the driver's answer line.
type pythonAnswer struct {
	ID              string   `json:"id"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	ReturnCode      int      `json:"return_code"`
	TimedOut        bool     `json:"timed_out"`
	Files           []string `json:"files"`
	StdoutTruncated bool     `json:"stdout_truncated"`
	StderrTruncated bool     `json:"stderr_truncated"`
	// CPUSeconds is the cell's CPU time as the driver measured it.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Calls, when not empty, makes this a pause: the cell awaits these
	// client tool calls.
	Calls []messages.PendingCall `json:"calls"`
}

// python runs one cell of the code_execution sub-tool.
func (e *Executor) python(ctx context.Context, call messages.ToolCall) *messages.ToolResult {
	fail := func(code, msg string) *messages.ToolResult {
		return messages.ErrorResult(messages.SubToolCodeExecution, code, msg)
	}
	if e.sb == nil {
		return fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
	}
	starter, ok := e.sb.(Sessions)
	if !ok {
		return fail(messages.CodeUnavailable, noSessionsMessage)
	}
	if call.Resume != nil {
		return e.resume(ctx, call, fail)
	}
	var in pythonInput
	if err := decodeInput(call.Input, &in); err != nil {
		return fail(messages.CodeInvalidToolInput, err.Error())
	}
	if in.Code == nil {
		return fail(messages.CodeInvalidToolInput, "Invalid input: 'code' is required.")
	}
	started := time.Now()
	p, note, err := e.takeTurn(ctx, starter, call)
	if err != nil {
		return e.sandboxFailure(ctx, fail, err)
	}
	end := e.begin(ctx, call.ContainerID)
	ans, cell, err := e.ask(ctx, call, p, *in.Code)
	return e.cellResult(ctx, call, p, &pausedCell{callID: call.ID, cell: cell, note: note, started: started, end: end}, ans, err)
}

// resume gives a paused cell the client's results of its tool calls and
// waits for it to end or pause again. A cell that is not paused here (its
// sandbox stopped, this server restarted, or the request reached another
// server) answers unavailable, saying so.
func (e *Executor) resume(ctx context.Context, call messages.ToolCall, fail func(code, msg string) *messages.ToolResult) *messages.ToolResult {
	gone := func(why string) *messages.ToolResult {
		return fail(messages.CodeUnavailable, fmt.Sprintf("The code of %s is no longer paused on this server, so the tool results cannot resume it: %s. Run the code again.", call.ID, why))
	}
	const (
		stopped  = "its sandbox stopped (idle shutdown or restart), and its Python interpreter with it"
		unknown  = "this server has not run the container's Python since it started (threadbox restarted, or another server ran the code)"
		replaced = "a later cell in the container abandoned it, or its results were sent already"
	)
	sl := e.py.slot(call.ContainerID)
	sl.mu.Lock()
	p, seen := sl.p, sl.seen
	sl.mu.Unlock()
	switch {
	case p == nil && seen:
		return gone(stopped)
	case p == nil:
		return gone(unknown)
	}
	p.mu.Lock()
	pc := p.paused
	if pc == nil || pc.callID != call.ID {
		p.mu.Unlock()
		if !p.alive() {
			return gone(stopped)
		}
		return gone(replaced)
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
		e.drop(call.ContainerID, p)
		e.endPaused(p, pc)
		<-p.turn
		return gone(stopped)
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
		return fail(messages.CodeUnavailable, "The tool results could not be encoded: "+err.Error())
	}
	pc.started = time.Now() // the wait for the client is not the cell's time
	ans, _, err := e.wait(ctx, call, p, pc.cell, append(msg, '\n'))
	return e.cellResult(ctx, call, p, pc, ans, err)
}

// cellResult turns a cell's answer into the call's result and gives the
// interpreter's turn back, unless the cell paused on client tool calls:
// then the pause keeps the turn, and the result lists the calls.
func (e *Executor) cellResult(ctx context.Context, call messages.ToolCall, p *interpreter, pc *pausedCell, ans *pythonAnswer, err error) *messages.ToolResult {
	fail := func(code, msg string) *messages.ToolResult {
		return messages.ErrorResult(messages.SubToolCodeExecution, code, msg)
	}
	if err == nil && ans != nil && len(ans.Calls) > 0 {
		p.mu.Lock()
		pc.calls = ans.Calls
		pc.ran += time.Since(pc.started)
		p.paused = pc
		p.mu.Unlock()
		go e.holdPaused(call.ContainerID, p, pc)
		return &messages.ToolResult{Type: messages.ResultCodeExecution, Files: []messages.OutputFile{}, Pending: ans.Calls}
	}
	defer func() { <-p.turn }()
	note, cell := pc.note, pc.cell
	e.meterCell(p, pc, ans)
	switch {
	case ctx.Err() != nil:
		return fail(messages.CodeUnavailable, "The request was cancelled.")
	case errors.Is(err, errInvocationTimeout):
		return fail(messages.CodeExecutionTimeExceeded, fmt.Sprintf("The call ran longer than %ss, where the interpreter could not interrupt it; the interpreter was stopped, so the next cell starts a new one without the earlier variables.", seconds(e.cfg.PythonTimeout)))
	case err != nil:
		return e.sandboxFailure(ctx, fail, err)
	}
	out := &messages.ToolResult{Type: messages.ResultCodeExecution, Files: []messages.OutputFile{}}
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
		return out
	}
	// What subprocesses wrote straight to the streams came first.
	out.Stdout = messages.CapOutput(append(rawOut, ans.Stdout...), outCut || ans.StdoutTruncated, e.cfg.MaxOutput)
	out.Stderr = note + messages.CapOutput(append(rawErr, ans.Stderr...), errCut || ans.StderrTruncated, e.cfg.MaxOutput)
	out.ReturnCode = ans.ReturnCode
	if ans.TimedOut {
		out.ReturnCode = cellTimeoutCode
		out.Stderr = joinLine(out.Stderr, fmt.Sprintf("%s: the cell ran longer than its %ss wall-clock limit and was stopped; the interpreter and its variables are kept.", DetectionTimeout, seconds(e.cfg.CellTimeout)))
	}
	for _, path := range ans.Files {
		if fi, err := e.files.Stat(ctx, call.ContainerID, path); err == nil && fi.Size > e.cfg.MaxOutputFileBytes {
			return fail(messages.CodeOutputFileTooLarge, fmt.Sprintf("The output file %s is %d bytes, more than the %d bytes a result may hand back; it stays in the outputs folder.", path, fi.Size, e.cfg.MaxOutputFileBytes))
		}
		out.Files = append(out.Files, messages.OutputFile{Type: messages.ResultCodeExecutionOutput, FileID: file.EncodeID(path)})
	}
	return out
}

// takeTurn returns the container's interpreter with its turn taken (one
// cell at a time). When the cell before ended it (its call's time limit),
// a new one is started.
func (e *Executor) takeTurn(ctx context.Context, starter Sessions, call messages.ToolCall) (*interpreter, string, error) {
	for attempt := 0; ; attempt++ {
		p, note, err := e.interpreter(ctx, starter, call)
		if err != nil {
			return nil, "", err
		}
		e.abandon(call.ContainerID, p)
		select {
		case p.turn <- struct{}{}:
		case <-ctx.Done():
			return nil, "", fmt.Errorf("tools: python: %w", ctx.Err())
		}
		if p.alive() || attempt > 0 {
			return p, note, nil
		}
		<-p.turn
	}
}

// sandboxFailure maps an error of the sandbox ports to an error result.
func (e *Executor) sandboxFailure(ctx context.Context, fail func(code, msg string) *messages.ToolResult, err error) *messages.ToolResult {
	switch {
	case ctx.Err() != nil:
		return fail(messages.CodeUnavailable, "The request was cancelled.")
	case errors.Is(err, sandbox.ErrNoBackend):
		return fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
	case errors.Is(err, sandbox.ErrUnsupported):
		return fail(messages.CodeUnavailable, noSessionsMessage)
	}
	return fail(messages.CodeUnavailable, "The sandbox is unavailable: "+messages.Explain(e.cfg.Log, err))
}

// interpreter returns the container's interpreter, starting one when there
// is none or it ended, with the note its cell's stderr starts with.
func (e *Executor) interpreter(ctx context.Context, starter Sessions, call messages.ToolCall) (*interpreter, string, error) {
	sl := e.py.slot(call.ContainerID)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if p := sl.p; p != nil {
		current, err := e.current(ctx, call.ContainerID, p)
		if err != nil {
			return nil, "", err
		}
		if current {
			return p, "", nil
		}
		_ = p.sess.Kill()
		sl.p = nil
	}
	note := FirstInterpreterNote
	if sl.seen {
		note = NewInterpreterNote
	}
	p := &interpreter{turn: make(chan struct{}, 1), wake: make(chan struct{}, 1), ended: make(chan struct{})}
	sess, err := starter.Start(ctx, call.ContainerID, sandbox.Command{
		Args:   []string{"python3", "-u", "-c", pythonDriver},
		Dir:    sandbox.WorkspaceDir,
		Env:    call.Env,
		Output: p.output,
	}, nil)
	if err != nil {
		return nil, "", fmt.Errorf("tools: start python: %w", err)
	}
	p.sess = sess
	if lr, ok := e.sb.(lifeReporter); ok {
		p.life = lr.Life(call.ContainerID)
	}
	go p.watch()
	sl.p, sl.seen = p, true
	return p, note, nil
}

// current marks the sandbox in use (booting it, or restoring its
// checkpoint, when it stopped) and reports whether p still runs in it:
// p's session goes on, and the sandbox is the life p started in. Where
// the port cannot tell lives, a sandbox that is not running took p with
// it.
func (e *Executor) current(ctx context.Context, containerID string, p *interpreter) (bool, error) {
	if !p.alive() {
		return false, nil
	}
	lr, ok := e.sb.(lifeReporter)
	if !ok {
		if r, ok := e.sb.(runningReporter); ok && !r.Running(containerID) {
			return false, nil
		}
	}
	if err := e.touch(ctx, containerID); err != nil {
		return false, err
	}
	if ok && lr.Life(containerID) != p.life {
		return false, nil
	}
	return p.alive(), nil
}

// touch runs a no-op command in the container's sandbox: the owner counts
// it as a use, so a sandbox whose interpreter runs cells is not idle.
func (e *Executor) touch(ctx context.Context, containerID string) error {
	_, err := e.sb.Exec(ctx, containerID, sandbox.Command{Args: []string{"true"}, Timeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("tools: touch sandbox: %w", err)
	}
	return nil
}

// keepAlive is how often a running cell marks its sandbox in use.
func (e *Executor) keepAlive() time.Duration {
	if r, ok := e.sb.(idleReporter); ok && r.Idle() > 0 {
		return max(min(keepAlive, r.Idle()/3), 100*time.Millisecond)
	}
	return keepAlive
}

// errInvocationTimeout reports a call over Config.PythonTimeout.
var errInvocationTimeout = errors.New("tools: python call over its time limit")

// ask sends one cell to the driver and waits for its answer (wait).
func (e *Executor) ask(ctx context.Context, call messages.ToolCall, p *interpreter, code string) (*pythonAnswer, *cellOutput, error) {
	env := map[string]string{}
	for _, kv := range call.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	codeTools := call.CodeTools
	if codeTools == nil {
		codeTools = []messages.CodeTool{}
	}
	id := rand.Text()
	req, err := json.Marshal(map[string]any{
		"id": id, "code": code, "env": env, "cell_timeout": e.cfg.CellTimeout.Seconds(),
		"max_output": e.cfg.MaxOutput, "outputs_dir": sandbox.OutputsDir,
		"tools": codeTools, "caller": call.CallerType, "tool_timeout": e.cfg.ToolResultTimeout.Seconds(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("tools: python request: %w", err)
	}
	cell := &cellOutput{id: id, limit: e.cfg.MaxOutput}
	p.mu.Lock()
	p.cell = cell
	p.mu.Unlock()
	return e.wait(ctx, call, p, cell, append(req, '\n'))
}

// wait writes msg (a cell, or the tool results of a paused one) to the
// driver and waits for the cell's next answer: its end, or a pause on
// client tool calls (then the cell stays the interpreter's, to catch what
// it answers later); or for the interpreter's end (then the answer is nil
// and the cell's output is what came before it).
func (e *Executor) wait(ctx context.Context, call messages.ToolCall, p *interpreter, cell *cellOutput, msg []byte) (*pythonAnswer, *cellOutput, error) {
	paused := false
	defer func() {
		if !paused {
			p.mu.Lock()
			p.cell = nil
			p.mu.Unlock()
		}
	}()
	if _, err := p.sess.Write(msg); err != nil {
		e.drop(call.ContainerID, p)
		return nil, nil, fmt.Errorf("tools: python request: %w", err)
	}
	limit := time.NewTimer(e.cfg.PythonTimeout)
	defer limit.Stop()
	tick := time.NewTicker(e.keepAlive())
	defer tick.Stop()
	answer := func() *pythonAnswer {
		p.mu.Lock()
		defer p.mu.Unlock()
		a := cell.answer
		if a != nil && len(a.Calls) > 0 {
			// A pause: the cell's next answer comes after the results.
			cell.answer = nil
			paused = true
		}
		return a
	}
	for {
		if a := answer(); a != nil {
			return a, cell, nil
		}
		select {
		case <-p.wake:
		case <-tick.C:
			_ = e.touch(ctx, call.ContainerID)
		case <-p.ended:
			// All output has been delivered once the end is seen.
			if a := answer(); a != nil {
				return a, cell, nil
			}
			e.drop(call.ContainerID, p)
			if p.endErr != nil {
				return nil, nil, fmt.Errorf("tools: python interpreter: %w", p.endErr)
			}
			return nil, cell, nil
		case <-limit.C:
			e.drop(call.ContainerID, p)
			return nil, nil, errInvocationTimeout
		case <-ctx.Done():
			e.drop(call.ContainerID, p)
			return nil, nil, fmt.Errorf("tools: python: %w", ctx.Err())
		}
	}
}

// holdPaused marks the sandbox of a paused cell in use, as a running
// cell's is, so that the idle sweeper does not stop it (and end the
// interpreter) while the client works on the calls: until the cell is
// resumed, abandoned or over, at most ToolResultTimeout and a minute. A
// cell still paused when its interpreter ends is metered then.
func (e *Executor) holdPaused(containerID string, p *interpreter, pc *pausedCell) {
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

// abandon ends the container's paused cell, if any, before a new cell
// runs: its pending tool calls raise in its code, whatever it answers is
// dropped, and the pause's turn is given back. A cell that does not end
// in time ends with its interpreter.
func (e *Executor) abandon(containerID string, p *interpreter) {
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
		e.drop(containerID, p)
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
			e.drop(containerID, p)
			return
		}
	}
}

// drop kills the interpreter and forgets it, so the next cell starts anew.
func (e *Executor) drop(containerID string, p *interpreter) {
	_ = p.sess.Kill()
	sl := e.py.slot(containerID)
	sl.mu.Lock()
	if sl.p == p {
		sl.p = nil
	}
	sl.mu.Unlock()
}

// joinLine appends line to s on a line of its own.
func joinLine(s, line string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + line
}
