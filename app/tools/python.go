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
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

// The Python interpreters of both tool families: code_execution's cells
// (codeexec.go) and repl_execute's calls (repl.go) run in persistent
// interpreters of one driver (python_driver.py), kept by one manager. Each
// family keeps its own interpreter per container, so that the two never
// share variables.

//go:embed python_driver.py
var pythonDriver string

// pyMarker starts each line of the driver's answers.
const pyMarker = "\x00TBPY "

// keepAlive is how often a running cell marks its sandbox in use, so that
// the idle sweeper does not stop it under the cell; more often when the
// owner's idle period is short (a third of it).
const keepAlive = 30 * time.Second

// interpreters keeps one Python interpreter per container. A container's
// slot stays for the process's life (a few words), so that a later
// interpreter can say an earlier one ended.
type interpreters struct {
	tag string // names the family's interpreters in the sandbox (Command.Tag)
	mu  sync.Mutex
	by  map[string]*slot
}

func newInterpreters(tag string) *interpreters {
	return &interpreters{tag: tag, by: map[string]*slot{}}
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
	slot *slot         // where it is kept
	life uint64        // the life of the sandbox it runs in (Sandbox.Life)
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
	paused *cellRun
}

// cellRun is one cell of a call: its output, the time of its segments and
// its meter. A code_execution cell whose code awaits client tool calls is
// paused: the request that ran it answered with the calls, and a later
// request with the same container and the client's results resumes it
// (Executor.resume).
type cellRun struct {
	callID  string // the call's srvtoolu_ id
	cell    *cellOutput
	calls   []wire.PendingCall
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

// pythonAnswer is the driver's answer.
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
	Calls []wire.PendingCall `json:"calls"`
	// NotPaused answers results sent by a server that attached to the
	// interpreter (resumeAttached) when no cell of theirs is paused.
	NotPaused bool `json:"not_paused"`
	// Value, Error and Final answer a repl_execute call: the repr of its
	// final expression, the traceback of its exception and what FINAL()
	// marked.
	Value *string `json:"value"`
	Error *string `json:"error"`
	Final *string `json:"final"`
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

// origin says where a call's interpreter came from.
type origin int

const (
	kept     origin = iota // the interpreter of the container's earlier calls
	first                  // the container's first interpreter in this process
	replaced               // a new one: the container's earlier interpreter ended
)

// takeTurn returns the container's interpreter of the family py with its
// turn taken (one cell at a time), and where it came from. When the cell
// before ended it (its call's time limit), a new one is started.
func (e *Executor) takeTurn(ctx context.Context, py *interpreters, call messages.ToolCall) (*interpreter, origin, error) {
	for attempt := 0; ; attempt++ {
		p, from, err := e.interpreter(ctx, py, call)
		if err != nil {
			return nil, kept, err
		}
		e.abandon(p)
		select {
		case p.turn <- struct{}{}:
		case <-ctx.Done():
			return nil, kept, fmt.Errorf("tools: python: %w", ctx.Err())
		}
		if p.alive() || attempt > 0 {
			return p, from, nil
		}
		<-p.turn
	}
}

// interpreter returns the container's interpreter of the family py,
// starting one when there is none or it ended.
func (e *Executor) interpreter(ctx context.Context, py *interpreters, call messages.ToolCall) (*interpreter, origin, error) {
	sl := py.slot(call.ContainerID)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if p := sl.p; p != nil {
		current, err := e.current(ctx, call.ContainerID, p)
		if err != nil {
			return nil, kept, err
		}
		if current {
			return p, kept, nil
		}
		_ = p.sess.Kill()
		sl.p = nil
	}
	from := first
	if sl.seen {
		from = replaced
	}
	p := &interpreter{slot: sl, turn: make(chan struct{}, 1), wake: make(chan struct{}, 1), ended: make(chan struct{})}
	cmd := sandbox.Command{
		Args:   []string{"python3", "-u", "-c", pythonDriver},
		Dir:    sandbox.WorkspaceDir,
		Env:    call.Env,
		Output: p.output,
		Tag:    py.tag,
	}
	// An interpreter no session of this process holds goes on where the
	// sandbox was restored from a checkpoint: one another server started
	// (a restart, a hand-over), or the one a rewind to an earlier turn
	// brought back.
	cmd.Attach = true
	sess, err := e.sb.Start(ctx, call.ContainerID, cmd, nil)
	switch {
	case err == nil:
		from = kept
	case !errors.Is(err, sandbox.ErrNoSession):
		return nil, kept, fmt.Errorf("tools: attach python: %w", err)
	default:
		cmd.Attach = false
		if sess, err = e.sb.Start(ctx, call.ContainerID, cmd, nil); err != nil {
			return nil, kept, fmt.Errorf("tools: start python: %w", err)
		}
	}
	p.sess = sess
	p.life = e.sb.Life(call.ContainerID)
	go p.watch()
	sl.p, sl.seen = p, true
	return p, from, nil
}

// reset ends the container's interpreter of the family py, if any, so
// that its next call starts a new one.
func (py *interpreters) reset(containerID string) {
	sl := py.slot(containerID)
	sl.mu.Lock()
	p := sl.p
	sl.p = nil
	sl.mu.Unlock()
	if p != nil {
		_ = p.sess.Kill()
	}
}

// current marks the sandbox in use (booting it, or restoring its
// checkpoint, when it stopped) and reports whether p still runs in it:
// p's session goes on, and the sandbox is the life p started in.
func (e *Executor) current(ctx context.Context, containerID string, p *interpreter) (bool, error) {
	if !p.alive() {
		return false, nil
	}
	if err := e.touch(ctx, containerID); err != nil {
		return false, err
	}
	return e.sb.Life(containerID) == p.life && p.alive(), nil
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
	if idle := e.sb.Idle(); idle > 0 {
		return max(min(keepAlive, idle/3), 100*time.Millisecond)
	}
	return keepAlive
}

// errCallTimeout reports a call over its time limit.
var errCallTimeout = errors.New("tools: python call over its time limit")

// errDetached reports a cell whose caller went while it ran: the cell runs
// on, and its interpreter with it.
var errDetached = errors.New("the caller went; the cell runs on")

// ask sends one cell to the driver, the request req with the cell's id,
// code and the call's environment added, and waits for its answer
// (wait) at most limit.
func (e *Executor) ask(ctx context.Context, call messages.ToolCall, p *interpreter, code string, req map[string]any, limit time.Duration) (*pythonAnswer, *cellOutput, error) {
	env := map[string]string{}
	for _, kv := range call.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	id := rand.Text()
	req["id"], req["code"], req["env"], req["max_output"] = id, code, env, e.cfg.MaxOutput
	msg, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("tools: python request: %w", err)
	}
	cell := &cellOutput{id: id, limit: e.cfg.MaxOutput}
	p.mu.Lock()
	p.cell = cell
	p.mu.Unlock()
	return e.wait(ctx, call, p, cell, append(msg, '\n'), limit)
}

// wait writes msg (a cell, or the tool results of a paused one) to the
// driver and waits at most limit for the cell's next answer: its end, or
// a pause on client tool calls (then the cell stays the interpreter's, to
// catch what it answers later); or for the interpreter's end (then the
// answer is nil and the cell's output is what came before it). Past the
// limit the interpreter is killed and the error is errCallTimeout.
//
// When ctx ends first (the client went), the cell is not stopped: it runs
// on in its interpreter, whose variables stay for the next cell, and the
// error wraps errDetached; the caller then finishes the cell in the
// background (finishDetached), keeping the interpreter's turn until it
// ends. A nil msg writes nothing: it waits for a cell already sent.
func (e *Executor) wait(ctx context.Context, call messages.ToolCall, p *interpreter, cell *cellOutput, msg []byte, limit time.Duration) (*pythonAnswer, *cellOutput, error) {
	paused, detached := false, false
	defer func() {
		if !paused && !detached {
			p.mu.Lock()
			p.cell = nil
			p.mu.Unlock()
		}
	}()
	if msg != nil {
		if _, err := p.sess.Write(msg); err != nil {
			e.drop(p)
			return nil, nil, fmt.Errorf("tools: python request: %w", err)
		}
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
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
			e.drop(p)
			if p.endErr != nil {
				return nil, nil, fmt.Errorf("tools: python interpreter: %w", p.endErr)
			}
			return nil, cell, nil
		case <-timer.C:
			e.drop(p)
			return nil, cell, errCallTimeout
		case <-ctx.Done():
			detached = true
			return nil, cell, fmt.Errorf("tools: python: %w: %w", errDetached, ctx.Err())
		}
	}
}

// meterCell records one cell for usage metering: its wall time (of all
// its segments), and its CPU time as the driver measured it (the
// interpreter's and its waited-for children's user and system time) or,
// when the interpreter ended during the cell, what the interpreter's exit
// accounting (the agent's wait4) holds beyond the cells already counted.
// The cell's turn is held.
func (e *Executor) meterCell(p *interpreter, run *cellRun, ans *pythonAnswer) {
	p.mu.Lock()
	ran := run.ran
	p.mu.Unlock()
	res := sandbox.Result{Duration: ran + time.Since(run.started)}
	if ans != nil {
		res.CPUTime = sandbox.CPUSeconds(ans.CPUSeconds)
	} else {
		// A call without an answer ended the interpreter or stopped it:
		// its exit accounting follows shortly.
		res.CPUTime = sandbox.ExitCPU(p.ended, func() (sandbox.Result, error) { return p.endRes, p.endErr }, p.metered)
	}
	p.metered += res.CPUTime
	run.end(res, nil)
}

// drop kills the interpreter and forgets it, so the next cell starts anew.
func (e *Executor) drop(p *interpreter) {
	_ = p.sess.Kill()
	p.slot.mu.Lock()
	if p.slot.p == p {
		p.slot.p = nil
	}
	p.slot.mu.Unlock()
}
