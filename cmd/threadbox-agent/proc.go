package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"

	"threadbox/infra/sandbox/agent/protocol"
)

// proc is one running command. Its pid is also its process group id: plain
// commands start with Setpgid, terminal ones with Setsid.
type proc struct {
	s      *server
	id     uint32
	req    protocol.Exec
	cap    int
	pid    int
	status <-chan exited
	begun  time.Time

	tty    *os.File    // terminal master, nil without a terminal
	stdout *os.File    // read ends of the output pipes, nil with a terminal
	stderr *os.File    //
	stdin  *stdinQueue // nil when stdin is /dev/null
	outDir string      // the command's $OUTPUT_DIR, "" when not asked for
	// outBefore is the outputs folder when the command started (with
	// outDir), to tell the files it wrote there straight.
	outBefore outputsState

	oomBefore int64
	oomKnown  bool

	// written counts the output bytes sent to the host; gen is the host
	// connection whose command it is (server.gen). The server's outMu
	// guards both.
	written int64
	gen     uint64
	// window is the output's flow control (protocol.Exec.Window), nil
	// without it.
	window *credit

	mu       sync.Mutex
	exited   bool
	timedOut bool
	// stage is where run is, for the log of a command that outlives its
	// kill (logStuck).
	stage atomic.Value // string
}

// startProc starts the command of req and registers it with the reaper.
func startProc(s *server, id uint32, req protocol.Exec) (p *proc, err error) {
	if len(req.Args) == 0 {
		return nil, errors.New("exec: empty argv")
	}
	// Only the serve loop's goroutine, this one, changes gen.
	p = &proc{s: s, id: id, req: req, cap: req.MaxOutput, gen: s.gen}
	if p.cap <= 0 {
		p.cap = protocol.DefaultMaxOutput
	}
	if req.Window > 0 {
		p.window = newCredit(req.Window)
	}
	dir := req.Dir
	if dir == "" {
		dir = s.cfg.workspace
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.cfg.workspace, dir)
	}
	env := append(slices.Clone(s.env), req.Env...)
	if req.OutputDir {
		if err := os.MkdirAll(s.cfg.tmpRoot, 0o755); err != nil {
			return nil, fmt.Errorf("exec: output dir: %w", err)
		}
		if err := own(s.cfg.tmpRoot); err != nil {
			return nil, fmt.Errorf("exec: output dir: %w", err)
		}
		d, err := os.MkdirTemp(s.cfg.tmpRoot, fmt.Sprintf("%d-", id))
		if err != nil {
			return nil, fmt.Errorf("exec: output dir: %w", err)
		}
		if err := own(d); err != nil {
			_ = os.RemoveAll(d)
			return nil, fmt.Errorf("exec: output dir: %w", err)
		}
		p.outDir = d
		p.outBefore = snapshotOutputs(s.cfg.outputs)
		env = append(env, "OUTPUT_DIR="+d)
		defer func() {
			if err != nil {
				_ = os.RemoveAll(d)
			}
		}()
	}
	if req.TTY != nil && !hasEnv(env, "TERM") {
		env = append(env, "TERM=xterm-256color")
	}
	cmd := exec.Command(lookPath(req.Args[0], env), req.Args[1:]...)
	cmd.Args[0] = req.Args[0]
	cmd.Dir = dir
	cmd.Env = env
	p.oomBefore, p.oomKnown = s.oom.kills()

	if req.TTY != nil {
		err = p.startTTY(cmd)
	} else {
		err = p.startPipes(cmd)
	}
	if err != nil {
		return nil, fmt.Errorf("exec: start %q: %w", req.Args[0], err)
	}
	p.begun = time.Now()
	// The reaper collects the status; the handle is not needed.
	_ = cmd.Process.Release()
	return p, nil
}

func (p *proc) startPipes(cmd *exec.Cmd) error {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return err
	}
	files = append(files, outR, outW)
	errR, errW, err := outputPipe()
	if err != nil {
		closeAll()
		return err
	}
	files = append(files, errR, errW)
	var inR, inW *os.File
	if p.req.OpenStdin {
		if inR, inW, err = os.Pipe(); err != nil {
			closeAll()
			return err
		}
		files = append(files, inR, inW)
		cmd.Stdin = inR
	} else if null := p.s.devNull(); null != nil {
		cmd.Stdin = null
	}
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: commandUser}
	pid, status, err := p.s.reaper.start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		closeAll()
		return err
	}
	// The child has its own copies of its ends.
	_ = outW.Close()
	_ = errW.Close()
	if inR != nil {
		_ = inR.Close()
		p.stdin = newStdinQueue(inW, false)
	}
	p.pid, p.status, p.stdout, p.stderr = pid, status, outR, errR
	return nil
}

// outputPipe makes a pipe for a command's output: the read end
// non-blocking, served by the runtime's poller, and the write end a plain
// blocking descriptor that the child inherits as it is. os.Pipe would
// register both ends with the poller, and starting the command would then
// set the write end back to blocking and closing it unregister it: eight
// system calls per command that do nothing.
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		_ = syscall.Close(fds[0])
		_ = syscall.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

func (p *proc) startTTY(cmd *exec.Cmd) error {
	size := &pty.Winsize{Rows: p.req.TTY.Rows, Cols: p.req.TTY.Cols}
	if size.Rows == 0 {
		size.Rows = 24
	}
	if size.Cols == 0 {
		size.Cols = 80
	}
	var master *os.File
	pid, status, err := p.s.reaper.start(func() (int, error) {
		var err error
		master, err = pty.StartWithAttrs(cmd, size, &syscall.SysProcAttr{Setsid: true, Setctty: true, Credential: commandUser})
		if err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		return err
	}
	p.pid, p.status, p.tty = pid, status, master
	p.stdin = newStdinQueue(master, true)
	return nil
}

// run streams the command's output until it ends, then kills what is left
// of its process group, collects $OUTPUT_DIR and sends the Exit frame.
func (p *proc) run() {
	var wg sync.WaitGroup
	var outTrunc, errTrunc bool
	var readers []*os.File
	if p.tty != nil {
		readers = []*os.File{p.tty}
		wg.Go(func() { outTrunc = p.pump(p.tty, protocol.TypeStdout) })
	} else {
		readers = []*os.File{p.stdout, p.stderr}
		wg.Go(func() { outTrunc = p.pump(p.stdout, protocol.TypeStdout) })
		wg.Go(func() { errTrunc = p.pump(p.stderr, protocol.TypeStderr) })
	}
	if p.stdin != nil {
		go p.stdin.run()
	}
	var timer *time.Timer
	if p.req.TimeoutMillis > 0 {
		timer = time.AfterFunc(time.Duration(p.req.TimeoutMillis)*time.Millisecond, p.timeout)
	}

	p.stage.Store("running")
	ex := <-p.status
	p.stage.Store("reading its last output")
	ws := ex.status
	elapsed := time.Since(p.begun)
	p.mu.Lock()
	p.exited = true
	timedOut := p.timedOut
	p.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	// Background children must not outlive the command.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)

	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	p.drain(drained, readers)
	if p.stdin != nil {
		p.stdin.stop()
	}
	for _, f := range readers {
		_ = f.Close()
	}

	exit := protocol.Exit{
		ExitCode:        ws.ExitStatus(),
		TimedOut:        timedOut,
		StdoutTruncated: outTrunc,
		StderrTruncated: errTrunc,
		DurationMillis:  elapsed.Milliseconds(),
		CPUMillis:       ex.cpu.Milliseconds(),
	}
	if ws.Signaled() {
		exit.ExitCode = -1
		exit.Signal = int(ws.Signal())
		if ws.Signal() == syscall.SIGKILL && p.oomKnown {
			if n, ok := p.s.oom.kills(); ok && n > p.oomBefore {
				exit.OOMHint = true
			}
		}
	}
	if p.outDir != "" {
		p.stage.Store("collecting its output files")
		files, err := moveOutputs(p.outDir, p.s.cfg.outputs)
		// Files the command wrote straight into the outputs folder are
		// its outputs too.
		exit.OutputFiles = append(files, writtenSince(p.s.cfg.outputs, p.outBefore, files)...)
		if err != nil {
			// What could not be moved stays where the command left it,
			// and the command's result says so.
			exit.Warning = fmt.Sprintf("%v; the files not moved are kept in %s", err, p.outDir)
			p.s.log.Warn("agent: output files", "id", p.id, "err", err)
		} else if err := os.RemoveAll(p.outDir); err != nil {
			p.s.log.Warn("agent: remove output dir", "id", p.id, "err", err)
		}
	}
	p.s.remove(p.id)
	p.stage.Store("sending its exit")
	if why := p.s.sendExit(p, exit); why != "" {
		p.stage.Store("exit not sent: " + why)
		return
	}
	p.stage.Store("ended")
}

// drain waits, once the command exited, until its output is read to the
// end (drained is closed). Output still open after the agent's drain time
// is held by a process that left the group: the readers are closed then.
// Time spent waiting for the host's acks does not count: that output is
// the host's to take, however slowly.
func (p *proc) drain(drained <-chan struct{}, readers []*os.File) {
	timer := time.NewTimer(p.s.cfg.drain)
	defer timer.Stop()
	for {
		select {
		case <-drained:
			return
		case <-timer.C:
		}
		if p.window != nil && p.window.blocked() {
			timer.Reset(p.s.cfg.drain)
			continue
		}
		p.s.log.Warn("agent: output still open after exit; closing", "id", p.id, "pid", p.pid)
		if p.window != nil {
			p.window.close()
		}
		for _, f := range readers {
			_ = f.Close()
		}
		<-drained
		return
	}
}

// pump streams f as frames of type t up to the cap, then keeps reading and
// dropping so that the command never blocks on a full pipe. With flow
// control it reads only what the window has room for, so the command
// blocks on its full pipe or terminal while the host is behind. It
// reports whether anything was dropped.
func (p *proc) pump(f *os.File, t protocol.Type) (truncated bool) {
	buf := make([]byte, protocol.MaxChunk)
	sent := 0
	for {
		want := len(buf)
		if p.window != nil {
			want = min(want, p.window.room())
		}
		n, err := f.Read(buf[:want])
		if n > 0 {
			keep := n
			if sent+n > p.cap {
				keep = p.cap - sent
				truncated = true
			}
			if keep > 0 {
				if p.window != nil {
					p.window.sent(keep)
				}
				p.s.sendOutput(p, t, buf[:keep])
				sent += keep
			}
		}
		if err != nil {
			return truncated
		}
	}
}

// timeout ends a command that ran too long: SIGTERM to its group, then
// SIGKILL after the grace period if it is still running.
func (p *proc) timeout() {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return
	}
	p.timedOut = true
	p.mu.Unlock()
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	time.AfterFunc(p.s.cfg.grace, func() {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		if !exited {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
	})
	time.AfterFunc(p.s.cfg.grace+stuckAfter, p.logStuck)
}

// stuckAfter is how long past its grace a timed-out command may go on
// before the agent logs what holds it. The host gives the sandbox up when
// a command outlives its timeout by 30 s (agent.DefaultOverrun).
const stuckAfter = 10 * time.Second

// logStuck logs, when the timed-out command p has not ended (or its exit
// was not sent), where its end is and the processes left in its group
// with their states and what they wait in: one the kernel cannot kill
// (state D) waits on something outside the sandbox, such as a file server
// that does not answer.
func (p *proc) logStuck() {
	stage, _ := p.stage.Load().(string)
	if stage == "ended" {
		return
	}
	p.s.log.Warn("agent: timed-out command not ended", "id", p.id, "pid", p.pid, "stage", stage, "group", groupStates("/proc", p.pid))
}

// groupStates describes the processes of the process group pgid under
// the proc file system at root: "pid (name) state in wchan", "; "-separated.
func groupStates(root string, pgid int) string {
	var out []string
	for _, p := range readProcs(root) {
		if p.pgrp != pgid {
			continue
		}
		desc := fmt.Sprintf("%d %s %s", p.pid, p.name, p.state)
		wchan, _ := os.ReadFile(filepath.Join(root, strconv.Itoa(p.pid), "wchan"))
		if w := strings.TrimSpace(string(wchan)); w != "" && w != "0" {
			desc += " in " + w
		}
		out = append(out, desc)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// control applies a Stdin, CloseStdin, Resize or Signal frame.
func (p *proc) control(f protocol.Frame) error {
	switch f.Type {
	case protocol.TypeStdin:
		if p.stdin == nil {
			return errors.New("stdin is not open")
		}
		return p.stdin.push(f.Payload)
	case protocol.TypeCloseStdin:
		if p.stdin == nil {
			return nil
		}
		p.stdin.close()
		return nil
	case protocol.TypeResize:
		var r protocol.Resize
		if err := protocol.Decode(f.Payload, &r); err != nil {
			return err
		}
		if p.tty == nil {
			return errors.New("resize: no terminal")
		}
		return pty.Setsize(p.tty, &pty.Winsize{Rows: r.Rows, Cols: r.Cols})
	case protocol.TypeSignal:
		var sg protocol.Signal
		if err := protocol.Decode(f.Payload, &sg); err != nil {
			return err
		}
		if sg.Signal <= 0 || sg.Signal > 64 {
			return fmt.Errorf("signal %d out of range", sg.Signal)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.exited {
			return nil
		}
		return syscall.Kill(-p.pid, syscall.Signal(sg.Signal))
	}
	return fmt.Errorf("unexpected frame %s", f.Type)
}

// lookPath finds a program without a slash in its name in the PATH of the
// command's environment (which may differ from the agent's). It returns
// name unchanged when nothing is found, so that exec reports the error.
func lookPath(name string, env []string) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v // the last one wins, as in exec
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return name
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// errStdinClosed reports stdin bytes that arrive after CloseStdin or exit.
var errStdinClosed = errors.New("stdin is closed")

// stdinQueue feeds a command's stdin from frames without ever blocking the
// frame reader: bytes wait in an outbox and are written by their own
// goroutine (run).
type stdinQueue struct {
	w       *os.File
	tty     bool // w is a terminal master: closing sends EOT and keeps w open
	out     *protocol.Outbox
	stopped atomic.Bool // the command exited, or a write failed
}

func newStdinQueue(w *os.File, tty bool) *stdinQueue {
	return &stdinQueue{w: w, tty: tty, out: protocol.NewOutbox(math.MaxInt)}
}

// push queues bytes for stdin; errStdinClosed once stdin was closed or the
// command exited.
func (q *stdinQueue) push(b []byte) error {
	if q.out.Closing() {
		return errStdinClosed
	}
	q.out.Push(b)
	return nil
}

// close ends stdin once the queued bytes are written.
func (q *stdinQueue) close() { q.out.Finish() }

// stop ends the writer when the command has exited.
func (q *stdinQueue) stop() {
	q.stopped.Store(true)
	q.out.Drop()
	if !q.tty {
		_ = q.w.Close() // unblocks a pending write
	}
}

// run writes the queued bytes to stdin, then ends it (EOT on a terminal)
// once closed.
func (q *stdinQueue) run() {
	for {
		chunks, done := q.out.Next()
		if q.stopped.Load() {
			return
		}
		for _, c := range chunks {
			if _, err := q.w.Write(c); err != nil {
				q.stopped.Store(true)
				q.out.Drop()
				if !q.tty {
					_ = q.w.Close()
				}
				return
			}
		}
		if done {
			if q.tty {
				_, _ = q.w.Write([]byte{0x04})
			} else {
				_ = q.w.Close()
			}
			return
		}
	}
}
