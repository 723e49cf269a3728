package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent/protocol"
)

// TruncatedMarker ends the text of an output stream that exceeded its cap.
const TruncatedMarker = "...[truncated]"

// ErrStart reports that the agent could not start a command: an empty argv,
// a program not found, a missing working directory.
var ErrStart = errors.New("agent: command did not start")

// errClosed is the cause reported to pending calls after Close.
var errClosed = errors.New("client closed")

// RenderOutput returns the text shown for a captured stream: b itself, or,
// when the stream was truncated, b (exactly the cap's bytes) followed by
// TruncatedMarker.
func RenderOutput(b []byte, truncated bool) []byte {
	if !truncated {
		return b
	}
	out := make([]byte, 0, len(b)+len(TruncatedMarker))
	out = append(out, b...)
	return append(out, TruncatedMarker...)
}

// TimeoutMessage is the stderr line of a command stopped by its timeout;
// the timeout is shown in whole seconds, rounded up.
func TimeoutMessage(timeout time.Duration) string {
	return fmt.Sprintf("Command timed out after %ds.", int64(math.Ceil(timeout.Seconds())))
}

// streamMaxOutput is the output cap of a streamed command: no cap.
const streamMaxOutput = 1 << 62

// Option configures a Client.
type Option func(*Client)

// WithMaxOutput sets the per-stream output cap used for commands whose
// MaxOutput is zero (default 1 MiB).
func WithMaxOutput(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxOutput = n
		}
	}
}

// WithKeepalive makes the client ping the agent every interval and treat
// the connection as lost when a ping gets no answer within timeout. It
// catches a sandbox that hangs without closing its connection.
func WithKeepalive(interval, timeout time.Duration) Option {
	return func(c *Client) {
		c.keepInterval, c.keepTimeout = interval, timeout
	}
}

// DefaultOverrun is how long past its timeout a command run by Exec may
// go on before the client takes its sandbox for hung (WithOverrun).
const DefaultOverrun = 30 * time.Second

// WithOverrun sets how long past its timeout a command run by Exec may go
// on, neither ending nor waiting for the host to take its output, before
// the client gives the connection up as a keepalive's silence does. The
// agent signals a timed-out command at once and kills it after a grace of
// seconds, so a command still running long after is held by something the
// agent cannot end (a task the kernel cannot kill, a stalled guest), and
// without a bound the call would wait as long as its caller does. 0 takes
// no bound.
func WithOverrun(d time.Duration) Option {
	return func(c *Client) { c.overrun = max(d, 0) }
}

// Client speaks the agent protocol over one connection. It is safe for
// concurrent use. When the connection breaks, every pending and later call
// fails with an error wrapping sandbox.ErrUnavailable.
type Client struct {
	rw           io.ReadWriteCloser
	maxOutput    int
	keepInterval time.Duration
	keepTimeout  time.Duration
	overrun      time.Duration // WithOverrun

	out    chan []byte // encoded frames for the writer goroutine
	done   chan struct{}
	failed sync.Once
	err    error // set before done is closed

	nextID atomic.Uint32
	mu     sync.Mutex
	procs  map[uint32]*Process
	pings  map[uint32]chan struct{}
	st     streams // loopback listeners and their connections (stream.go)

	// A checkpoint holds the connection (hold.go): from the Hold frame
	// written until Resume, nothing else is written, and the end of the
	// connection is not its loss but the wait for the next one.
	connMu  sync.Mutex
	held    bool
	resumed chan struct{}                  // closed by Resume
	answers map[uint32]chan protocol.Frame // Held and Released frames (or Errors), by request id
	orphans map[uint32]*orphan             // commands of an earlier host (hold.go); mu guards it
}

// NewClient starts a client on rw, which carries the agent's stdout as its
// reader and the agent's stdin as its writer (see NewConn). The client owns
// rw and closes it when the connection fails or on Close.
func NewClient(rw io.ReadWriteCloser, opts ...Option) *Client {
	c := &Client{
		rw:        rw,
		maxOutput: protocol.DefaultMaxOutput,
		overrun:   DefaultOverrun,
		out:       make(chan []byte, 64),
		done:      make(chan struct{}),
		procs:     map[uint32]*Process{},
		pings:     map[uint32]chan struct{}{},
		answers:   map[uint32]chan protocol.Frame{},
	}
	for _, o := range opts {
		o(c)
	}
	go c.readLoop()
	go c.writeLoop()
	if c.keepInterval > 0 && c.keepTimeout > 0 {
		go c.keepalive()
	}
	return c
}

// NewConn joins a reader (the agent's stdout, for Docker demultiplexed with
// stdcopy into a pipe) and a writer (the agent's stdin) into the connection
// NewClient takes. closeFn, when not nil, is called once by Close.
func NewConn(r io.Reader, w io.Writer, closeFn func() error) io.ReadWriteCloser {
	return &conn{r: r, w: w, closeFn: closeFn}
}

type conn struct {
	r       io.Reader
	w       io.Writer
	once    sync.Once
	closeFn func() error
}

func (c *conn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *conn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *conn) Close() error {
	var err error
	c.once.Do(func() {
		if c.closeFn != nil {
			err = c.closeFn()
		}
	})
	return err
}

// Done is closed when the connection is gone; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is up, then an error wrapping
// sandbox.ErrUnavailable.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close closes the connection. Pending calls fail with an error wrapping
// sandbox.ErrUnavailable. The agent kills its commands when its input ends.
func (c *Client) Close() error {
	c.fail(errClosed)
	return nil
}

// fail marks the connection lost (once) and closes it.
func (c *Client) fail(cause error) {
	c.failed.Do(func() {
		c.err = fmt.Errorf("%w: agent connection: %w", sandbox.ErrUnavailable, cause)
		close(c.done)
		_ = c.conn().Close()
		c.closeStreams()
	})
}

func (c *Client) readLoop() {
	for {
		rw := c.conn()
		f, err := protocol.ReadFrame(rw)
		if err != nil {
			if c.awaitResume(rw) {
				continue
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("agent closed its output")
			}
			c.fail(err)
			return
		}
		c.dispatch(f)
	}
}

func (c *Client) writeLoop() {
	for {
		select {
		case b := <-c.out:
			rw, ok := c.writable()
			if !ok {
				return
			}
			if protocol.Type(b[0]) == protocol.TypeHold {
				// Held from this frame on: the next frame waits for Resume.
				c.hold()
			}
			if _, err := rw.Write(b); err != nil {
				c.fail(fmt.Errorf("write: %w", err))
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *Client) keepalive() {
	t := time.NewTicker(c.keepInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if c.isHeld() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.keepTimeout)
		err := c.Ping(ctx)
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			c.fail(fmt.Errorf("keepalive: no answer within %s", c.keepTimeout))
			return
		}
	}
}

// dispatch routes one frame from the agent. It never blocks on a caller.
func (c *Client) dispatch(f protocol.Frame) {
	if c.answer(f) {
		return
	}
	if (f.Type >= protocol.TypeStreamOpen && f.Type <= protocol.TypeStreamAck) || f.Type == protocol.TypeError {
		if c.dispatchStream(f) {
			return
		}
	}
	switch f.Type {
	case protocol.TypePong:
		c.mu.Lock()
		ch := c.pings[f.ID]
		delete(c.pings, f.ID)
		c.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	case protocol.TypeStarted, protocol.TypeStdout, protocol.TypeStderr, protocol.TypeExit, protocol.TypeError:
		c.mu.Lock()
		p := c.procs[f.ID]
		if p == nil && c.keepOrphanFrame(f) {
			if f.Type == protocol.TypeExit || f.Type == protocol.TypeError {
				delete(c.orphans, f.ID) // ended: nothing to attach to
			}
			c.mu.Unlock()
			return
		}
		if f.Type == protocol.TypeExit || f.Type == protocol.TypeError {
			delete(c.procs, f.ID)
		}
		c.mu.Unlock()
		if p != nil {
			p.onFrame(f)
		}
	default:
		// Unknown or reserved frame types are ignored.
	}
}

// send queues one frame for the writer.
func (c *Client) send(ctx context.Context, t protocol.Type, id uint32, payload []byte) error {
	if len(payload) > protocol.MaxPayload {
		return fmt.Errorf("agent: send %s: %w", t, protocol.ErrFrameTooLarge)
	}
	b := protocol.AppendFrame(make([]byte, 0, protocol.HeaderSize+len(payload)), t, id, payload)
	select {
	case <-c.done:
		return c.err
	default:
	}
	select {
	case c.out <- b:
		return nil
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("agent: send %s: %w", t, ctx.Err())
	}
}

func (c *Client) sendJSON(ctx context.Context, t protocol.Type, id uint32, v any) error {
	b, err := protocol.Encode(v)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return c.send(ctx, t, id, b)
}

func (c *Client) newID() uint32 {
	for {
		if id := c.nextID.Add(1); id != 0 {
			return id
		}
	}
}

// Ping asks the agent for a Pong and waits for it.
func (c *Client) Ping(ctx context.Context) error {
	id := c.newID()
	ch := make(chan struct{})
	c.mu.Lock()
	c.pings[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pings, id)
		c.mu.Unlock()
	}
	if err := c.send(ctx, protocol.TypePing, id, nil); err != nil {
		forget()
		return fmt.Errorf("agent: ping: %w", err)
	}
	select {
	case <-ch:
		return nil
	case <-c.done:
		forget()
		return fmt.Errorf("agent: ping: %w", c.err)
	case <-ctx.Done():
		forget()
		return fmt.Errorf("agent: ping: %w", ctx.Err())
	}
}

// TTY is the size of a pseudo-terminal.
type TTY struct {
	Rows uint16
	Cols uint16
}

// StartOptions tunes Start.
type StartOptions struct {
	// TTY, when set, runs the command on a pseudo-terminal; its output then
	// arrives as sandbox.Stdout only.
	TTY *TTY
	// Stream makes the output unbounded and passes it only to cmd.Output:
	// the Process keeps none of it (its Result has empty Stdout and
	// Stderr), so a long-lived command may print without limit.
	Stream bool
}

// Start starts cmd and returns once the agent reports it running. Unlike
// Exec, stdin stays open (after cmd.Stdin is written) until CloseStdin, and
// cancelling ctx after Start returns does not affect the command. Output
// streams to cmd.Output as it arrives.
func (c *Client) Start(ctx context.Context, cmd sandbox.Command, opts StartOptions) (*Process, error) {
	if opts.Stream {
		cmd.MaxOutput = streamMaxOutput
	}
	p, err := c.launch(ctx, cmd, opts.TTY, true)
	if err != nil {
		return nil, err
	}
	if len(cmd.Stdin) > 0 {
		if _, err := p.write(ctx, cmd.Stdin); err != nil {
			p.killAsync()
			return nil, err
		}
	}
	select {
	case <-p.started:
	case <-c.done:
		return nil, fmt.Errorf("agent: start: %w", c.err)
	case <-ctx.Done():
		p.killAsync()
		return nil, fmt.Errorf("agent: start: %w", ctx.Err())
	}
	if p.startErr != nil {
		return nil, p.startErr
	}
	return p, nil
}

// Session starts cmd as a long-lived sandbox.Session: no timeout, output
// streamed to cmd.Output and not kept, on a terminal when tty is set. Both
// backends' sandbox.Sessions are this.
func (c *Client) Session(ctx context.Context, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error) {
	opts := StartOptions{Stream: true}
	if tty != nil {
		opts.TTY = &TTY{Rows: tty.Rows, Cols: tty.Cols}
	}
	if cmd.Attach {
		return c.Attach(cmd.Tag, cmd.Output)
	}
	cmd.Timeout = 0
	p, err := c.Start(ctx, cmd, opts)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Exec runs cmd to its end and returns how it ended; see the package doc for
// how the output text is rendered. Output streams to cmd.Output as it
// arrives. Cancelling ctx kills the command's process group in the sandbox
// and returns at once with ctx's error. A lost connection returns an error
// wrapping sandbox.ErrUnavailable; a command that could not start, one
// wrapping ErrStart. A command with a timeout that is still running its
// overrun past it (WithOverrun) fails the connection.
func (c *Client) Exec(ctx context.Context, cmd sandbox.Command) (sandbox.Result, error) {
	p, err := c.launch(ctx, cmd, nil, len(cmd.Stdin) > 0)
	if err != nil {
		return sandbox.Result{}, err
	}
	if len(cmd.Stdin) > 0 {
		if _, err := p.write(ctx, cmd.Stdin); err != nil {
			p.killAsync()
			return sandbox.Result{}, err
		}
		if err := c.send(ctx, protocol.TypeCloseStdin, p.id, nil); err != nil {
			p.killAsync()
			return sandbox.Result{}, fmt.Errorf("agent: close stdin: %w", err)
		}
	}
	if p.timeout > 0 && c.overrun > 0 {
		stop := p.watchOverrun(c.overrun)
		defer stop()
	}
	res, err := p.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		p.killAsync()
	}
	return res, err
}

// launch registers a process and sends its Exec frame.
func (c *Client) launch(ctx context.Context, cmd sandbox.Command, tty *TTY, openStdin bool) (*Process, error) {
	if len(cmd.Args) == 0 {
		return nil, fmt.Errorf("%w: empty argv", ErrStart)
	}
	limit := cmd.MaxOutput
	if limit <= 0 {
		limit = c.maxOutput
	}
	req := protocol.Exec{
		Args:      cmd.Args,
		Dir:       cmd.Dir,
		Env:       cmd.Env,
		MaxOutput: limit,
		OutputDir: cmd.OutputDir,
		OpenStdin: openStdin,
		Tag:       cmd.Tag,
	}
	if cmd.Timeout > 0 {
		req.TimeoutMillis = max(cmd.Timeout.Milliseconds(), 1)
	}
	if tty != nil {
		req.TTY = &protocol.TTY{Rows: tty.Rows, Cols: tty.Cols}
	}
	if limit == streamMaxOutput && cmd.Output != nil {
		// Uncapped output is bounded by flow control instead.
		req.Window = protocol.OutputWindow
	}
	payload, err := protocol.Encode(req)
	if err != nil {
		return nil, fmt.Errorf("agent: exec: %w", err)
	}
	p := newProcess(c, c.newID(), limit, cmd)
	c.mu.Lock()
	c.procs[p.id] = p
	c.mu.Unlock()
	if err := c.send(ctx, protocol.TypeExec, p.id, payload); err != nil {
		c.mu.Lock()
		delete(c.procs, p.id)
		c.mu.Unlock()
		return nil, fmt.Errorf("agent: exec: %w", err)
	}
	return p, nil
}
