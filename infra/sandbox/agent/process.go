package agent

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent/protocol"
)

// Process is a command started in the sandbox. Its methods are safe for
// concurrent use.
type Process struct {
	c       *Client
	id      uint32
	limit   int
	timeout time.Duration
	output  func(sandbox.Stream, []byte)
	begun   time.Time
	stream  bool // output goes to output only and is not kept (StartOptions.Stream)

	started   chan struct{} // closed on Started or Error
	finished  chan struct{} // closed on Exit or Error
	delivered chan struct{} // closed when finished and every chunk went to output
	wake      chan struct{}

	// Set before started or finished is closed, read after.
	pid      int
	offset   int64 // output written before an attach (Client.Attach)
	startErr error
	exit     protocol.Exit

	mu           sync.Mutex
	stdout       []byte
	stderr       []byte
	outTrunc     bool
	errTrunc     bool
	queue        []chunk
	startClosed  bool
	finishClosed bool
	// window is the flow control the agent keeps to for this command
	// (protocol.Started.Window), 0 for none; queued counts the bytes
	// queued for output; preAcked the queued bytes acknowledged already
	// (an orphan's, see keepOrphanFrame); overrun is set once the agent
	// sent far past the window.
	window   int
	queued   int
	preAcked int
	overrun  bool
}

// maxOutputQueue bounds the output queued for a command that keeps to flow
// control: its stdout and stderr may each fill the window, and a Release
// starts the window afresh. An agent that sends more does not keep to it:
// the command is killed and the rest of its output dropped.
const maxOutputQueue = 4 * protocol.OutputWindow

type chunk struct {
	stream sandbox.Stream
	data   []byte
}

func newProcess(c *Client, id uint32, limit int, cmd sandbox.Command) *Process {
	p := &Process{
		c: c, id: id, limit: limit, timeout: cmd.Timeout, output: cmd.Output, begun: time.Now(),
		stream:   cmd.MaxOutput == streamMaxOutput,
		started:  make(chan struct{}),
		finished: make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}
	if p.output == nil {
		p.delivered = p.finished
	} else {
		p.delivered = make(chan struct{})
		go p.deliver()
	}
	return p
}

// PID returns the command's process id inside the sandbox (also its process
// group id); it is 0 until the agent reports the start.
func (p *Process) PID() int {
	select {
	case <-p.started:
		return p.pid
	default:
		return 0
	}
}

// Offset counts the output bytes the command wrote before this client
// attached to it (Client.Attach); 0 for a command it started.
func (p *Process) Offset() int64 { return p.offset }

// Done is closed when the command has ended (or could not start).
func (p *Process) Done() <-chan struct{} { return p.finished }

// onFrame applies one frame from the agent; called by the read loop only.
func (p *Process) onFrame(f protocol.Frame) {
	switch f.Type {
	case protocol.TypeStarted:
		var s protocol.Started
		_ = protocol.Decode(f.Payload, &s)
		p.mu.Lock()
		p.pid = s.PID
		p.window = s.Window
		p.closeStarted()
		p.mu.Unlock()
	case protocol.TypeStdout, protocol.TypeStderr:
		p.mu.Lock()
		stream, buf, trunc := sandbox.Stdout, &p.stdout, &p.outTrunc
		if f.Type == protocol.TypeStderr {
			stream, buf, trunc = sandbox.Stderr, &p.stderr, &p.errTrunc
		}
		// The agent enforces the cap; the client enforces it too so that a
		// misbehaving agent cannot grow host memory.
		data := f.Payload
		if p.stream {
			if p.output != nil && len(data) > 0 && !p.overrun {
				p.queue = append(p.queue, chunk{stream, data})
				p.queued += len(data)
				if p.window > 0 && p.queued > maxOutputQueue {
					p.overrun, p.queue, p.queued = true, nil, 0
					p.killAsync()
				}
			}
			p.mu.Unlock()
			p.signal()
			return
		}
		if room := p.limit - len(*buf); len(data) > room {
			data = data[:max(room, 0)]
			*trunc = true
		}
		if len(data) > 0 {
			*buf = append(*buf, data...)
			if p.output != nil {
				p.queue = append(p.queue, chunk{stream, data})
			}
		}
		p.mu.Unlock()
		p.signal()
	case protocol.TypeExit:
		var e protocol.Exit
		if err := protocol.Decode(f.Payload, &e); err != nil {
			e = protocol.Exit{ExitCode: -1, Warning: err.Error()}
		}
		p.mu.Lock()
		p.exit = e
		if e.TimedOut && p.output != nil {
			p.queue = append(p.queue, chunk{sandbox.Stderr, []byte(timeoutSuffix(p.stderr, p.errTrunc || e.StderrTruncated, p.timeout))})
		}
		p.closeFinished()
		p.mu.Unlock()
		p.signal()
	case protocol.TypeError:
		var e protocol.Error
		if err := protocol.Decode(f.Payload, &e); err != nil {
			e.Message = err.Error()
		}
		p.mu.Lock()
		p.startErr = fmt.Errorf("%w: %s", ErrStart, e.Message)
		p.closeFinished()
		p.mu.Unlock()
		p.signal()
	}
}

func (p *Process) closeStarted() {
	if !p.startClosed {
		p.startClosed = true
		close(p.started)
	}
}

// closeFinished marks the command ended, and so started too; p.mu is held.
func (p *Process) closeFinished() {
	p.closeStarted()
	p.finishClosed = true
	close(p.finished)
}

func (p *Process) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// deliver hands queued chunks to the Output callback, in arrival order and
// outside the read loop, so that a slow callback delays only its command.
// With flow control it gives the window back as chunks are handed over.
func (p *Process) deliver() {
	defer close(p.delivered)
	var taken acks // of the window the agent granted, once it is known
	for {
		p.mu.Lock()
		q, fin, window := p.queue, p.finishClosed, p.window
		p.queue = nil
		p.mu.Unlock()
		for _, ch := range q {
			p.output(ch.stream, ch.data)
			if window == 0 {
				continue
			}
			p.mu.Lock()
			p.queued = max(p.queued-len(ch.data), 0)
			n := len(ch.data)
			if p.preAcked > 0 {
				skip := min(p.preAcked, n)
				p.preAcked -= skip
				n -= skip
			}
			fin = p.finishClosed
			p.mu.Unlock()
			if taken.every == 0 {
				taken = newAcks(window)
			}
			if n := taken.took(n); n > 0 && !fin {
				p.c.sendAck(protocol.TypeOutputAck, p.id, n)
			}
		}
		if len(q) > 0 {
			continue // more may have arrived meanwhile
		}
		if fin {
			return
		}
		select {
		case <-p.wake:
		case <-p.c.done:
			p.mu.Lock()
			fin = p.finishClosed
			p.mu.Unlock()
			if !fin {
				return
			}
		}
	}
}

// Wait waits for the command to end and returns its result, rendered as
// the package doc says. Cancelling ctx stops the wait, not the command.
func (p *Process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.delivered:
	case <-p.c.done:
		select {
		case <-p.finished:
			<-p.delivered
		default:
			return sandbox.Result{}, fmt.Errorf("agent: wait: %w", p.c.err)
		}
	case <-ctx.Done():
		return sandbox.Result{}, fmt.Errorf("agent: wait: %w", ctx.Err())
	}
	select {
	case <-p.finished:
	default:
		// Delivery stopped because the connection went away first.
		return sandbox.Result{}, fmt.Errorf("agent: wait: %w", p.c.err)
	}
	if p.startErr != nil {
		return sandbox.Result{}, p.startErr
	}
	return p.result(), nil
}

// watchOverrun fails the connection when the command is still running
// overrun past its timeout, and returns what stops the watch. Exec's
// output keeps to no window, so the agent's end of a command never waits
// for the host; a connection held for a checkpoint starts the bound
// again.
func (p *Process) watchOverrun(overrun time.Duration) (stop func()) {
	quit := make(chan struct{})
	go func() {
		t := time.NewTimer(time.Until(p.begun.Add(p.timeout + overrun)))
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-p.finished:
				return
			case <-p.c.done:
				return
			case <-quit:
				return
			}
			if p.c.isHeld() {
				t.Reset(overrun)
				continue
			}
			p.c.fail(fmt.Errorf("command %d still running %s after its %s timeout: the sandbox does not end it", p.id, overrun, p.timeout))
			return
		}
	}()
	return func() { close(quit) }
}

// result builds the Result once the Exit frame is in.
func (p *Process) result() sandbox.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.exit
	r := sandbox.Result{
		ExitCode:        e.ExitCode,
		StdoutTruncated: p.outTrunc || e.StdoutTruncated,
		StderrTruncated: p.errTrunc || e.StderrTruncated,
		TimedOut:        e.TimedOut,
		OOMKilled:       e.OOMHint,
		OutputFiles:     e.OutputFiles,
		Warning:         e.Warning,
		Duration:        time.Since(p.begun),
		CPUTime:         time.Duration(e.CPUMillis) * time.Millisecond,
	}
	switch {
	case e.TimedOut:
		r.ExitCode = 124
	case e.Signal > 0:
		r.ExitCode = 128 + e.Signal
	}
	r.Stdout = RenderOutput(p.stdout, r.StdoutTruncated)
	r.Stderr = RenderOutput(p.stderr, r.StderrTruncated)
	if e.TimedOut {
		r.Stderr = append(r.Stderr, timeoutSuffix(p.stderr, r.StderrTruncated, p.timeout)...)
	}
	return r
}

// timeoutSuffix is what follows the captured stderr of a timed-out command:
// the timeout line, on a line of its own.
func timeoutSuffix(stderr []byte, truncated bool, timeout time.Duration) string {
	msg := TimeoutMessage(timeout)
	if truncated || (len(stderr) > 0 && stderr[len(stderr)-1] != '\n') {
		return "\n" + msg
	}
	return msg
}

// Write sends b to the command's stdin (or terminal).
func (p *Process) Write(b []byte) (int, error) {
	return p.write(context.Background(), b)
}

func (p *Process) write(ctx context.Context, b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), protocol.MaxChunk)
		// send copies b into the frame, so the caller may reuse it at once.
		if err := p.c.send(ctx, protocol.TypeStdin, p.id, b[:k]); err != nil {
			return n, fmt.Errorf("agent: stdin: %w", err)
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// CloseStdin closes the command's stdin; on a terminal it sends EOT (^D).
func (p *Process) CloseStdin() error {
	if err := p.c.send(context.Background(), protocol.TypeCloseStdin, p.id, nil); err != nil {
		return fmt.Errorf("agent: close stdin: %w", err)
	}
	return nil
}

// Resize changes the size of the command's terminal.
func (p *Process) Resize(rows, cols uint16) error {
	if err := p.c.sendJSON(context.Background(), protocol.TypeResize, p.id, protocol.Resize{Rows: rows, Cols: cols}); err != nil {
		return fmt.Errorf("agent: resize: %w", err)
	}
	return nil
}

// Signal sends sig to the command's whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.c.sendJSON(context.Background(), protocol.TypeSignal, p.id, protocol.Signal{Signal: int(sig)}); err != nil {
		return fmt.Errorf("agent: signal: %w", err)
	}
	return nil
}

// Kill sends SIGKILL to the command's whole process group.
func (p *Process) Kill() error { return p.Signal(syscall.SIGKILL) }

// killAsync kills the process group without making the caller wait for a
// busy writer.
func (p *Process) killAsync() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.c.sendJSON(ctx, protocol.TypeSignal, p.id, protocol.Signal{Signal: int(syscall.SIGKILL)})
	}()
}
