package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// maxStreamQueue bounds the bytes from the agent queued for one connection
// whose host-side reader is slow; beyond it the connection is cut. An agent
// that keeps to flow control never gets there (protocol.StreamWindow).
const maxStreamQueue = protocol.StreamWindow

// acks counts the bytes taken from one flow-controlled stream (a loopback
// connection's, a command's output) and says when to acknowledge them: a
// quarter of the window at a time, so the agent always gets room back
// before it runs dry.
type acks struct{ every, pending int }

func newAcks(window int) acks { return acks{every: window / 4} }

// took counts n more bytes taken and returns how many to acknowledge now,
// 0 while under a quarter of the window.
func (a *acks) took(n int) int {
	if a.pending += n; a.pending < a.every {
		return 0
	}
	n, a.pending = a.pending, 0
	return n
}

// streams is the client's table of loopback listeners and connections.
type streams struct {
	mu        sync.Mutex
	listeners map[uint32]*Listener
	conns     map[uint32]*streamConn
}

// Listener is a loopback listener inside the sandbox. Accept returns the
// host end of each connection the agent accepts. It implements
// net.Listener; it ends when Close is called or the connection to the
// agent is lost.
type Listener struct {
	c      *Client
	id     uint32
	addr   string
	opened chan protocol.Opened
	failed chan string
	accept chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// Listen asks the agent to listen on addr (a loopback host:port inside the
// sandbox) and returns once it does.
func (c *Client) Listen(ctx context.Context, addr string) (*Listener, error) {
	l := &Listener{
		c: c, id: c.newID(),
		opened: make(chan protocol.Opened, 1), failed: make(chan string, 1),
		accept: make(chan net.Conn, 16), closed: make(chan struct{}),
	}
	c.st.mu.Lock()
	if c.st.listeners == nil {
		c.st.listeners, c.st.conns = map[uint32]*Listener{}, map[uint32]*streamConn{}
	}
	c.st.listeners[l.id] = l
	c.st.mu.Unlock()
	if err := c.sendJSON(ctx, protocol.TypeStreamOpen, l.id, protocol.Listen{Addr: addr}); err != nil {
		l.forget()
		return nil, fmt.Errorf("agent: listen: %w", err)
	}
	select {
	case o := <-l.opened:
		l.addr = o.Addr
		go l.watch()
		return l, nil
	case msg := <-l.failed:
		l.forget()
		return nil, fmt.Errorf("agent: listen %s: %s", addr, msg)
	case <-c.done:
		l.forget()
		return nil, fmt.Errorf("agent: listen: %w", c.err)
	case <-ctx.Done():
		_ = l.Close()
		return nil, fmt.Errorf("agent: listen: %w", ctx.Err())
	}
}

// watch closes the listener when the agent connection ends.
func (l *Listener) watch() {
	select {
	case <-l.c.done:
		l.forget()
	case <-l.closed:
	}
}

func (l *Listener) forget() {
	l.once.Do(func() {
		close(l.closed)
		l.c.st.mu.Lock()
		delete(l.c.st.listeners, l.id)
		l.c.st.mu.Unlock()
	})
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.accept:
		return nc, nil
	case <-l.closed:
		return nil, fmt.Errorf("agent: accept: %w", net.ErrClosed)
	}
}

// Close stops listening; accepted connections stay open.
func (l *Listener) Close() error {
	select {
	case <-l.closed:
		return nil
	default:
	}
	l.forget()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.c.send(ctx, protocol.TypeStreamClose, l.id, nil)
	return nil
}

// Addr is the address listened on inside the sandbox.
func (l *Listener) Addr() net.Addr { return streamAddr(l.addr) }

// Done is closed when the listener has ended.
func (l *Listener) Done() <-chan struct{} { return l.closed }

// streamAddr is an address inside the sandbox.
type streamAddr string

func (a streamAddr) Network() string { return "sandbox" }
func (a streamAddr) String() string  { return string(a) }

// streamConn is the host's view of one accepted connection: a net.Pipe
// whose far end is fed from StreamData frames and read into StreamData
// frames.
type streamConn struct {
	net.Conn // the end handed to the caller
	far      net.Conn
	local    net.Addr
	remote   net.Addr
	out      *protocol.Outbox // what the agent sent, for far

	// ack acknowledges consumed bytes to an agent that keeps to flow
	// control; nil for one that does not.
	ack func(n int)
}

func (s *streamConn) LocalAddr() net.Addr  { return s.local }
func (s *streamConn) RemoteAddr() net.Addr { return s.remote }

// dispatchStream routes a stream frame (or an Error for a pending listen).
// It reports whether the frame was a stream frame.
func (c *Client) dispatchStream(f protocol.Frame) bool {
	c.st.mu.Lock()
	l := c.st.listeners[f.ID]
	sc := c.st.conns[f.ID]
	c.st.mu.Unlock()
	switch f.Type {
	case protocol.TypeError:
		if l == nil {
			return false
		}
		var e protocol.Error
		_ = protocol.Decode(f.Payload, &e)
		select {
		case l.failed <- e.Message:
		default:
		}
		return true
	case protocol.TypeStreamOpened:
		var o protocol.Opened
		_ = protocol.Decode(f.Payload, &o)
		if f.ID&protocol.AgentIDBit == 0 {
			if l != nil {
				select {
				case l.opened <- o:
				default:
				}
			}
			return true
		}
		c.st.mu.Lock()
		parent := c.st.listeners[o.Listener]
		c.st.mu.Unlock()
		if parent == nil {
			c.sendAsync(protocol.TypeStreamClose, f.ID)
			return true
		}
		near, far := net.Pipe()
		sc := &streamConn{Conn: near, far: far, local: streamAddr(parent.addr), remote: streamAddr(o.Addr), out: protocol.NewOutbox(maxStreamQueue)}
		if o.Window > 0 {
			id := f.ID
			sc.ack = func(n int) { c.sendAck(protocol.TypeStreamAck, id, n) }
		}
		c.st.mu.Lock()
		c.st.conns[f.ID] = sc
		c.st.mu.Unlock()
		go c.pumpOut(f.ID, sc)
		go sc.out.Drain(sc.far, sc.consumed()) // what the agent sends, for the caller
		select {
		case parent.accept <- sc:
		default:
			// Nobody is accepting fast enough: refuse the connection.
			c.closeConn(f.ID, true)
		}
		return true
	case protocol.TypeStreamData:
		if sc != nil && !sc.out.Push(f.Payload) {
			c.closeConn(f.ID, true)
		}
		return true
	case protocol.TypeStreamClose:
		if sc != nil {
			c.st.mu.Lock()
			delete(c.st.conns, f.ID)
			c.st.mu.Unlock()
			sc.out.Finish()
		}
		return true
	}
	return false
}

// sendAsync sends a frame without a payload without blocking the caller.
func (c *Client) sendAsync(t protocol.Type, id uint32) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.send(ctx, t, id, nil)
	}()
}

// sendAck acknowledges n consumed bytes of id (StreamAck for a loopback
// connection, OutputAck for a command's output), giving up after 5 s.
func (c *Client) sendAck(t protocol.Type, id uint32, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.sendJSON(ctx, t, id, protocol.Ack{Bytes: n})
}

// pumpOut carries what the caller writes to the agent until the pipe ends.
func (c *Client) pumpOut(id uint32, sc *streamConn) {
	buf := make([]byte, protocol.MaxChunk)
	for {
		n, err := sc.far.Read(buf)
		if n > 0 {
			if serr := c.send(context.Background(), protocol.TypeStreamData, id, buf[:n]); serr != nil {
				err = serr
			}
		}
		if err != nil {
			c.closeConn(id, true)
			return
		}
	}
}

// closeConn forgets connection id and closes it; tell sends StreamClose.
func (c *Client) closeConn(id uint32, tell bool) {
	c.st.mu.Lock()
	sc := c.st.conns[id]
	delete(c.st.conns, id)
	c.st.mu.Unlock()
	if sc != nil {
		_ = sc.far.Close()
		sc.out.Drop()
	}
	if tell && sc != nil {
		c.sendAsync(protocol.TypeStreamClose, id)
	}
}

// closeStreams ends every listener and connection; called once the agent
// connection is lost.
func (c *Client) closeStreams() {
	c.st.mu.Lock()
	cs := c.st.conns
	c.st.conns = map[uint32]*streamConn{}
	c.st.mu.Unlock()
	for _, sc := range cs {
		_ = sc.far.Close()
	}
}

// consumed acknowledges, when the agent keeps to flow control, the bytes
// the caller read.
func (s *streamConn) consumed() func(n int) {
	if s.ack == nil {
		return nil
	}
	a := newAcks(protocol.StreamWindow)
	return func(read int) {
		if n := a.took(read); n > 0 {
			s.ack(n)
		}
	}
}
