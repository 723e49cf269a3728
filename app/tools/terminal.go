package tools

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

// quiet is how long output must pause before a read returns early.
const quiet = 200 * time.Millisecond

// terminals keeps the exec_command sessions of every container.
type terminals struct {
	e  *Executor
	mu sync.Mutex
	by map[string]map[string]*terminal // container id -> session id -> session
}

func newTerminals(e *Executor) *terminals {
	return &terminals{e: e, by: map[string]map[string]*terminal{}}
}

// terminal is one PTY session. Its output is kept in a window of the last
// SessionBuffer bytes; cursors count every byte ever written, so a reader
// that fell behind the window learns how much it missed.
type terminal struct {
	id      string
	pid     int
	sess    sandbox.Session
	done    chan struct{}
	command string // what it runs; "" for a session taken over (attach)
	size    sandbox.TTY
	started time.Time

	mu       sync.Mutex
	out      window
	exitCode *int
	lost     string // why the session ended without an exit code
	wake     chan struct{}
	// changed is closed and replaced whenever output arrives, waking
	// every watcher of the workspace's terminal view at once (wake wakes
	// the one write_stdin call that waits).
	changed chan struct{}
}

// newTerminal returns a session's terminal before it starts.
func newTerminal(id string, limit int) *terminal {
	return &terminal{id: id, out: window{max: limit}, done: make(chan struct{}), wake: make(chan struct{}, 1), changed: make(chan struct{}), started: time.Now()}
}

// window keeps the last max bytes of a session's output. Its buffer grows
// to max and is then written around, so that a write costs its own length
// however full the window is (moving the kept bytes down for each chunk
// cost a copy of the whole window: a session printing without pause was
// read slower than it printed). Cursors count every byte of the session's
// output from start, the cursor of the first byte the window received.
type window struct {
	buf   []byte
	max   int
	start int64 // the cursor of the first byte written here
	n     int64 // bytes written here
}

// end is the cursor after the last byte.
func (w *window) end() int64 { return w.start + w.n }

// write appends b, dropping what no longer fits.
func (w *window) write(b []byte) {
	if w.max <= 0 {
		w.n += int64(len(b))
		return
	}
	if len(b) > w.max {
		w.n += int64(len(b) - w.max)
		b = b[len(b)-w.max:]
	}
	if size := int(min(int64(w.max), w.n+int64(len(b)))); len(w.buf) < size {
		w.buf = slices.Grow(w.buf, size-len(w.buf))[:size]
	}
	at := int(w.n % int64(w.max))
	k := copy(w.buf[at:], b)
	copy(w.buf, b[k:])
	w.n += int64(len(b))
}

// since returns a copy of what the window holds after cursor, the cursor
// after it, and how many bytes after cursor it no longer holds.
func (w *window) since(cursor int64) (data []byte, end, dropped int64) {
	end = w.end()
	if base := end - int64(len(w.buf)); cursor < base {
		dropped, cursor = base-cursor, base
	}
	cursor = min(cursor, end)
	data = make([]byte, end-cursor)
	if len(data) > 0 {
		at := int((cursor - w.start) % int64(w.max))
		k := copy(data, w.buf[at:])
		copy(data[k:], w.buf)
	}
	return data, end, dropped
}

func (t *terminal) output(_ sandbox.Stream, b []byte) {
	t.mu.Lock()
	t.out.write(b)
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *terminal) alive() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// read returns the output after since, the new cursor and how many bytes
// after since were dropped from the window.
func (t *terminal) read(since int64) (string, int64, int64) {
	b, cursor, dropped, _ := t.readRaw(since)
	return strings.ToValidUTF8(string(b), "\uFFFD"), cursor, dropped
}

func (t *terminal) cursor() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.end()
}

// wait waits until the session ends, deadline passes, or (when early) new
// output after since arrived and then paused for quiet.
func (t *terminal) wait(ctx context.Context, since int64, d time.Duration, early bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		var pause <-chan time.Time
		if early && t.cursor() > since {
			pause = time.After(quiet)
		}
		select {
		case <-t.done:
			return
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-pause:
			return
		}
	}
}

// TerminalResult is the content of exec_command and write_stdin results.
type TerminalResult struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	PID       int    `json:"pid"`
	Stdout    string `json:"stdout"`
	Cursor    int64  `json:"cursor"`
	// Status is "running", "exited", or "lost" (the sandbox went away).
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code"`
	Alive    bool   `json:"alive"`
	// Dropped counts output bytes after since that no longer fit the
	// session's buffer and were lost.
	Dropped int64 `json:"dropped_bytes,omitempty"`
}

func (t *terminal) result(typ string, since int64) TerminalResult {
	out, cur, dropped := t.read(since)
	r := TerminalResult{Type: typ, SessionID: t.id, PID: t.pid, Stdout: out, Cursor: cur, Status: "running", Alive: true, Dropped: dropped}
	if !t.alive() {
		t.mu.Lock()
		r.Alive, r.ExitCode, r.Status = false, t.exitCode, "exited"
		if t.lost != "" {
			r.Status = "lost"
		}
		t.mu.Unlock()
	}
	return r
}

// execInput is the input of exec_command.
type execInput struct {
	Command      *string  `json:"command"`
	Rows         *int     `json:"rows"`
	Cols         *int     `json:"cols"`
	GraceSeconds *float64 `json:"grace_seconds"`
}

// execCommand runs an exec_command call: a command on a pseudo-terminal,
// kept as a session when it outlives its grace time.
func (e *Executor) execCommand(ctx context.Context, call messages.ToolCall, in execInput) (any, error) {
	if in.Command == nil || strings.TrimSpace(*in.Command) == "" {
		return nil, invalidInput("Invalid input: 'command' is required.")
	}
	size := sandbox.TTY{Rows: 24, Cols: 80}
	for name, v := range map[string]*int{"rows": in.Rows, "cols": in.Cols} {
		if v == nil {
			continue
		}
		if *v < 1 || *v > 1000 {
			return nil, invalidInput("Invalid input: '%s' must be from 1 to 1000.", name)
		}
		if name == "rows" {
			size.Rows = uint16(*v)
		} else {
			size.Cols = uint16(*v)
		}
	}
	grace, err := waitSeconds("grace_seconds", in.GraceSeconds, DefaultGrace)
	if err != nil {
		return nil, err
	}
	if err := e.terms.room(call.ContainerID); err != nil {
		return nil, err
	}
	t := newTerminal("sess_"+rand.Text()[:16], e.cfg.SessionBuffer)
	t.command, t.size = *in.Command, size
	started := t.started
	end := e.begin(ctx, call.ContainerID)
	sess, err := e.sb.Start(ctx, call.ContainerID, sandbox.Command{
		Args:   []string{"bash", "-c", *in.Command},
		Dir:    sandbox.WorkspaceDir,
		Env:    call.Env,
		Output: t.output,
		Tag:    terminalTag(t.id),
	}, &size)
	if err != nil {
		// A session that did not start ran nothing.
		end(sandbox.Result{}, sandbox.NotStarted(err))
		return nil, err
	}
	t.watch(sess, started, end)
	t.wait(ctx, 0, grace, false)
	if !t.alive() {
		r := t.result("exec_command_result", 0)
		r.SessionID = ""
		return r, nil
	}
	e.terms.add(call.ContainerID, t)
	return t.result("exec_command_result", 0), nil
}

// terminalTag names a session's command in the sandbox (Command.Tag).
func terminalTag(sessionID string) string { return "terminal:" + sessionID }

// watch makes sess the terminal's session and waits for its end in the
// background, metering it then (end).
func (t *terminal) watch(sess sandbox.Session, started time.Time, end func(sandbox.Result, error)) {
	t.sess, t.pid = sess, sess.PID()
	go func() {
		res, err := sess.Wait(context.Background())
		// The session counts as one command when it ends: its wall time
		// and the agent's wait4 CPU time; a session whose sandbox went
		// away first counts its wall time only.
		if err != nil {
			res = sandbox.Result{Duration: time.Since(started)}
		}
		end(res, nil)
		t.mu.Lock()
		if err != nil {
			t.lost = err.Error()
		} else {
			code := res.ExitCode
			t.exitCode = &code
		}
		t.mu.Unlock()
		close(t.done)
	}()
}

// attach takes over the session id of the container that another server
// started, when the sandbox was restored from its checkpoint (a restart,
// a hand-over): its cursor goes on from the output that server received.
// nil when the sandbox runs no such session.
func (e *Executor) attach(ctx context.Context, call messages.ToolCall, id string) (*terminal, error) {
	t := newTerminal(id, e.cfg.SessionBuffer)
	end := e.begin(ctx, call.ContainerID)
	sess, err := e.sb.Start(ctx, call.ContainerID, sandbox.Command{Tag: terminalTag(id), Attach: true, Output: t.output}, nil)
	if err != nil {
		end(sandbox.Result{}, sandbox.NotStarted(err))
		if errors.Is(err, sandbox.ErrNoSession) {
			return nil, nil
		}
		return nil, err
	}
	t.mu.Lock()
	t.out.start += sess.Offset()
	t.mu.Unlock()
	t.watch(sess, time.Now(), end)
	e.terms.add(call.ContainerID, t)
	return t, nil
}

// room makes sure another session fits in the container, forgetting
// sessions that ended.
func (ts *terminals) room(containerID string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	live := 0
	m := ts.by[containerID]
	for id, t := range m {
		if t.alive() {
			live++
		} else if len(m) >= ts.e.cfg.MaxSessions {
			// Ended sessions wait for a last read only while there is room.
			delete(m, id)
		}
	}
	if live >= ts.e.cfg.MaxSessions {
		return refuse(wire.CodeTooManyRequests, "%d terminal sessions are running in this container, the most allowed; end one (exit it, or send Ctrl-C \\u0003 or Ctrl-D \\u0004 with write_stdin) first.", live)
	}
	return nil
}

func (ts *terminals) add(containerID string, t *terminal) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	m := ts.by[containerID]
	if m == nil {
		m = map[string]*terminal{}
		ts.by[containerID] = m
	}
	m[t.id] = t
}

func (ts *terminals) get(containerID, id string) *terminal {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.by[containerID][id]
}

func (ts *terminals) forget(containerID, id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.by[containerID], id)
}

// writeInput is the input of write_stdin.
type writeInput struct {
	SessionID   *string  `json:"session_id"`
	Input       *string  `json:"input"`
	Since       *int64   `json:"since"`
	WaitSeconds *float64 `json:"wait_seconds"`
}

// writeStdin runs a write_stdin call: input to a session, and its output
// since a cursor.
func (e *Executor) writeStdin(ctx context.Context, call messages.ToolCall, in writeInput) (any, error) {
	if in.SessionID == nil || *in.SessionID == "" {
		return nil, invalidInput("Invalid input: 'session_id' is required.")
	}
	if in.Input == nil {
		return nil, invalidInput("Invalid input: 'input' is required.")
	}
	wait, err := waitSeconds("wait_seconds", in.WaitSeconds, DefaultWait)
	if err != nil {
		return nil, err
	}
	t := e.terms.get(call.ContainerID, *in.SessionID)
	if t == nil && strings.HasPrefix(*in.SessionID, "sess_") {
		if t, err = e.attach(ctx, call, *in.SessionID); err != nil {
			return nil, err
		}
	}
	if t == nil {
		return nil, invalidInput("No session %s in this container: it never existed, or it ended and its last output was read.", *in.SessionID)
	}
	since := t.cursor()
	if in.Since != nil {
		if *in.Since < 0 {
			return nil, invalidInput("Invalid input: 'since' must not be negative.")
		}
		since = *in.Since
	}
	if *in.Input != "" {
		if !t.alive() {
			r := t.result("write_stdin_result", since)
			e.terms.forget(call.ContainerID, t.id)
			return nil, invalidInput("Session %s has ended (exit code %s); its input was not sent. Last output:\n%s", t.id, exitText(r.ExitCode), r.Stdout)
		}
		if _, err := t.sess.Write([]byte(*in.Input)); err != nil {
			return nil, err
		}
	}
	t.wait(ctx, since, wait, true)
	r := t.result("write_stdin_result", since)
	if !r.Alive {
		e.terms.forget(call.ContainerID, t.id)
	}
	return r, nil
}

func exitText(code *int) string {
	if code == nil {
		return "unknown"
	}
	return strconv.Itoa(*code)
}
