package sandboxtools

import (
	"bytes"
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
	"threadbox/domain/sandbox"
)

//go:embed repl_driver.py
var replDriver string

// replMarker starts the driver's answer line.
const replMarker = "\x00TBREPL "

// repls keeps one Python REPL per container.
type repls struct {
	e  *Executor
	mu sync.Mutex
	by map[string]*replProc
}

func newRepls(e *Executor) *repls { return &repls{e: e, by: map[string]*replProc{}} }

// replProc is one running driver.
type replProc struct {
	sess sandbox.Session
	busy sync.Mutex // one request at a time
	done chan struct{}
	// endRes and endErr say how the driver ended, once done is closed.
	endRes sandbox.Result
	endErr error
	// metered is the CPU time of this REPL's calls recorded so far (usage
	// metering); busy guards it.
	metered time.Duration

	mu   sync.Mutex
	out  []byte // bytes since the last answer
	wake chan struct{}
}

func (p *replProc) output(_ sandbox.Stream, b []byte) {
	p.mu.Lock()
	// A runaway print between answers cannot grow host memory without bound.
	if len(p.out)+len(b) > 4*DefaultMaxOutput {
		keep := p.out[len(p.out)-min(len(p.out), 2*DefaultMaxOutput):]
		p.out = append([]byte(nil), keep...)
	}
	p.out = append(p.out, b...)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *replProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// replInput is the input of repl_execute.
type replInput struct {
	Code           *string  `json:"code"`
	Restart        bool     `json:"restart"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

// ReplResult is the content of a repl_execute result.
type ReplResult struct {
	Type   string  `json:"type"`
	Stdout string  `json:"stdout"`
	Stderr string  `json:"stderr"`
	Value  *string `json:"value"` // repr of the last expression, when not None
	Error  *string `json:"error"` // the traceback of an exception
	Final  *string `json:"final"` // what FINAL() marked, if it was called
	// Restarted reports that this call ran in a fresh REPL: asked for, or
	// the previous one had ended (crashed, killed, sandbox restarted).
	Restarted bool `json:"restarted"`

	// cpu is the call's CPU time as the driver measured it (usage metering).
	cpu time.Duration
}

func (e *Executor) repl(ctx context.Context, call messages.ToolCall) (any, error) {
	var in replInput
	if err := decode(call.Input, &in); err != nil {
		return nil, err
	}
	if in.Code == nil {
		return nil, invalidInput("Invalid input: 'code' is required.")
	}
	timeout, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	p, fresh, err := e.repls.get(ctx, call, in.Restart)
	if err != nil {
		return nil, err
	}
	p.busy.Lock()
	defer p.busy.Unlock()
	started := time.Now()
	end := e.begin(ctx, call.ContainerID)
	res, err := e.repls.ask(ctx, call, p, *in.Code, timeout)
	e.meterCall(p, started, res, end)
	if err != nil {
		return nil, err
	}
	res.Restarted = fresh
	return res, nil
}

// get returns the container's REPL, starting one when there is none, it
// ended, or restart is asked for.
func (r *repls) get(ctx context.Context, call messages.ToolCall, restart bool) (*replProc, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.by[call.ContainerID]
	if p != nil && p.alive() && !restart {
		return p, false, nil
	}
	if p != nil {
		_ = p.sess.Kill()
		delete(r.by, call.ContainerID)
	}
	p = &replProc{done: make(chan struct{}), wake: make(chan struct{}, 1)}
	sess, err := r.e.start(ctx, call.ContainerID, sandbox.Command{
		Args:   []string{"python3", "-u", "-c", replDriver},
		Env:    call.Env,
		Output: p.output,
	}, nil)
	if err != nil {
		return nil, false, err
	}
	p.sess = sess
	go func() {
		p.endRes, p.endErr = sess.Wait(context.Background())
		close(p.done)
	}()
	r.by[call.ContainerID] = p
	return p, true, nil
}

// ask sends one request to the driver and waits for its answer.
func (r *repls) ask(ctx context.Context, call messages.ToolCall, p *replProc, code string, timeout time.Duration) (*ReplResult, error) {
	env := map[string]string{}
	for _, kv := range call.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	id := rand.Text()
	req, err := json.Marshal(map[string]any{"id": id, "code": code, "env": env})
	if err != nil {
		return nil, fmt.Errorf("sandboxtools: repl: %w", err)
	}
	p.mu.Lock()
	p.out = nil
	p.mu.Unlock()
	if _, err := p.sess.Write(append(req, '\n')); err != nil {
		return nil, fmt.Errorf("sandboxtools: repl: %w", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	parse := func() (*ReplResult, bool, error) {
		p.mu.Lock()
		out := p.out
		p.mu.Unlock()
		if i := bytes.Index(out, []byte(replMarker)); i >= 0 {
			if j := bytes.IndexByte(out[i:], '\n'); j >= 0 {
				res, err := r.answer(out[:i], out[i+len(replMarker):i+j], id)
				return res, true, err
			}
		}
		return nil, false, nil
	}
	for {
		if res, ok, err := parse(); ok {
			return res, err
		}
		select {
		case <-p.wake:
		case <-p.done:
			// The last output may hold the answer; else the REPL crashed.
			if res, ok, err := parse(); ok {
				return res, err
			}
			p.mu.Lock()
			out := p.out
			p.mu.Unlock()
			return nil, fail(messages.CodeUnavailable, "The Python REPL ended while running the code (it crashed or was killed); its state is lost and the next call starts a clean one. Output before the end:\n%s", messages.CapOutput(out, false, 8192))
		case <-timer.C:
			_ = p.sess.Kill()
			return nil, fail(messages.CodeExecutionTimeExceeded, "The code ran longer than %ds; the REPL was stopped and its state is lost.", int64(timeout/time.Second))
		case <-ctx.Done():
			_ = p.sess.Kill()
			return nil, ctx.Err()
		}
	}
}

// answer decodes the driver's answer line; raw is what the code's
// subprocesses wrote straight to the REPL's stdout before it.
func (r *repls) answer(raw, line []byte, id string) (*ReplResult, error) {
	var a struct {
		ID     string  `json:"id"`
		Stdout string  `json:"stdout"`
		Stderr string  `json:"stderr"`
		Value  *string `json:"value"`
		Error  *string `json:"error"`
		Final  *string `json:"final"`
		CPU    float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal(line, &a); err != nil {
		return nil, fail(messages.CodeUnavailable, "The Python REPL answered something unreadable: %v", err)
	}
	if a.ID != id {
		return nil, errors.New("sandboxtools: repl: answer to another request")
	}
	limit := r.e.cfg.MaxOutput
	out := string(raw) + a.Stdout
	return &ReplResult{
		Type:   "repl_execute_result",
		Stdout: messages.CapOutput([]byte(out), false, limit),
		Stderr: messages.CapOutput([]byte(a.Stderr), false, limit),
		Value:  a.Value, Error: a.Error, Final: a.Final,
		cpu: sandbox.CPUSeconds(a.CPU),
	}, nil
}

// start starts a session in the container's sandbox; a backend without
// sessions is the tool's unavailable error.
func (e *Executor) start(ctx context.Context, containerID string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	s, err := e.sb.Start(ctx, containerID, cmd, tty)
	if errors.Is(err, sandbox.ErrUnsupported) {
		return nil, fail(messages.CodeUnavailable, "%s", unavailableNoSessionsM)
	}
	return s, err
}

// meterCall records one repl_execute call for usage metering: its wall
// time, and its CPU time as the driver measured it (the REPL's and its
// waited-for children's user and system time) or, when the REPL ended
// during the call, what its exit accounting (the agent's wait4) holds
// beyond the calls already counted. p.busy is held.
func (e *Executor) meterCall(p *replProc, started time.Time, res *ReplResult, end func(sandbox.Result, error)) {
	if e.cfg.Meter == nil {
		return
	}
	u := sandbox.Result{Duration: time.Since(started)}
	if res != nil {
		u.CPUTime = res.cpu
	} else {
		// A call without an answer ended the interpreter or stopped it:
		// its exit accounting follows shortly.
		u.CPUTime = sandbox.ExitCPU(p.done, func() (sandbox.Result, error) { return p.endRes, p.endErr }, p.metered)
	}
	p.metered += u.CPUTime
	end(u, nil)
}
