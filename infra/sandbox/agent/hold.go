package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent/protocol"
)

// Holding the connection for a checkpoint (protocol/hold.go). Hold closes
// the loopback listeners (the host makes them again after a restore),
// sends Hold behind every frame queued before it, and returns once the
// agent answered Held: from the Hold frame on, the client writes nothing
// and the end of its connection (the checkpointed sandbox stopping) is not
// its loss. Resume goes on over the restored sandbox's connection, or the
// same one when no checkpoint was taken: the client's commands and
// sessions continue. A new client of a restored sandbox calls Release
// first instead.

// conn returns the connection in use.
func (c *Client) conn() io.ReadWriteCloser {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	return c.rw
}

// isHeld reports whether the connection is held.
func (c *Client) isHeld() bool {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	return c.held
}

// hold marks the connection held; the writer calls it as it writes Hold.
func (c *Client) hold() {
	c.connMu.Lock()
	c.held, c.resumed = true, make(chan struct{})
	c.connMu.Unlock()
}

// unhold ends the hold.
func (c *Client) unhold() {
	c.connMu.Lock()
	if c.held {
		c.held = false
		close(c.resumed)
	}
	c.connMu.Unlock()
}

// writable waits while the connection is held and returns the connection
// to write to; false once the client failed.
func (c *Client) writable() (io.ReadWriteCloser, bool) {
	for {
		c.connMu.Lock()
		held, resumed, rw := c.held, c.resumed, c.rw
		c.connMu.Unlock()
		if !held {
			return rw, true
		}
		select {
		case <-resumed:
		case <-c.done:
			return nil, false
		}
	}
}

// awaitResume is called when reading rw failed: it reports whether the
// reader goes on (with the connection Resume installed), waiting for
// Resume when rw ended while held.
func (c *Client) awaitResume(rw io.ReadWriteCloser) bool {
	c.connMu.Lock()
	if c.rw != rw {
		c.connMu.Unlock()
		return true
	}
	if !c.held {
		c.connMu.Unlock()
		return false
	}
	resumed := c.resumed
	c.connMu.Unlock()
	select {
	case <-resumed:
		return c.conn() != rw
	case <-c.done:
		return false
	}
}

// answer hands a Held or Released frame, or an Error for a Hold or a
// Release, to its waiter; it reports whether f was one.
func (c *Client) answer(f protocol.Frame) bool {
	if f.Type != protocol.TypeHeld && f.Type != protocol.TypeReleased && f.Type != protocol.TypeError {
		return false
	}
	c.mu.Lock()
	ch, ok := c.answers[f.ID]
	delete(c.answers, f.ID)
	c.mu.Unlock()
	if ok {
		ch <- f
	}
	return ok
}

// ask registers a waiter for the answer to request id.
func (c *Client) ask(id uint32) chan protocol.Frame {
	ch := make(chan protocol.Frame, 1)
	c.mu.Lock()
	c.answers[id] = ch
	c.mu.Unlock()
	return ch
}

// await waits for the answer want to request id.
func (c *Client) await(ctx context.Context, id uint32, ch chan protocol.Frame, want protocol.Type) (protocol.Frame, error) {
	forget := func() {
		c.mu.Lock()
		delete(c.answers, id)
		c.mu.Unlock()
	}
	select {
	case f := <-ch:
		if f.Type != want {
			var e protocol.Error
			_ = protocol.Decode(f.Payload, &e)
			return f, fmt.Errorf("agent: %s refused: %s", want, e.Message)
		}
		return f, nil
	case <-c.done:
		forget()
		return protocol.Frame{}, fmt.Errorf("agent: %s: %w", want, c.err)
	case <-ctx.Done():
		forget()
		return protocol.Frame{}, fmt.Errorf("agent: %s: %w", want, ctx.Err())
	}
}

// Hold closes the client's loopback listeners and their connections and
// holds the connection for a checkpoint (see above). On an error the hold
// is over; an agent too old to hold answers with one.
func (c *Client) Hold(ctx context.Context) error {
	c.st.mu.Lock()
	ls := make([]*Listener, 0, len(c.st.listeners))
	for _, l := range c.st.listeners {
		ls = append(ls, l)
	}
	ids := make([]uint32, 0, len(c.st.conns))
	for id := range c.st.conns {
		ids = append(ids, id)
	}
	c.st.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	for _, id := range ids {
		c.closeConn(id, false)
		if err := c.send(ctx, protocol.TypeStreamClose, id, nil); err != nil {
			return fmt.Errorf("agent: hold: %w", err)
		}
	}
	id := c.newID()
	ch := c.ask(id)
	if err := c.send(ctx, protocol.TypeHold, id, nil); err != nil {
		return fmt.Errorf("agent: hold: %w", err)
	}
	if _, err := c.await(ctx, id, ch, protocol.TypeHeld); err != nil {
		c.unhold()
		return err
	}
	return nil
}

// Resume ends a hold: it writes Release over rw, the connection of the
// restored sandbox (the one before is closed), or over the held one when
// rw is nil, and waits for Released. Commands and sessions started before
// Hold go on.
func (c *Client) Resume(ctx context.Context, rw io.ReadWriteCloser) error {
	return c.ResumeWith(ctx, rw, protocol.Release{})
}

// ResumeWith is Resume with r as the Release frame's payload (a restored
// microVM's clock and seed).
func (c *Client) ResumeWith(ctx context.Context, rw io.ReadWriteCloser, r protocol.Release) error {
	payload, err := releasePayload(r)
	if err != nil {
		return err
	}
	c.connMu.Lock()
	if !c.held {
		c.connMu.Unlock()
		return errors.New("agent: resume: the connection is not held")
	}
	old := c.rw
	if rw != nil {
		c.rw = rw
	}
	cur := c.rw
	c.connMu.Unlock()
	if rw != nil {
		_ = old.Close()
	}
	id := c.newID()
	ch := c.ask(id)
	// The writer waits while held: this is the only write.
	if _, err := cur.Write(protocol.AppendFrame(nil, protocol.TypeRelease, id, payload)); err != nil {
		c.unhold()
		c.fail(fmt.Errorf("resume: %w", err))
		return fmt.Errorf("agent: resume: %w", c.err)
	}
	c.unhold()
	f, err := c.await(ctx, id, ch, protocol.TypeReleased)
	if err != nil {
		return err
	}
	return c.released(f)
}

// Release lets a restored agent, held since its checkpoint, write again,
// on a client new to it: later requests are numbered above every id the
// agent knows.
func (c *Client) Release(ctx context.Context) error {
	return c.ReleaseWith(ctx, protocol.Release{})
}

// ReleaseWith is Release with r as the Release frame's payload (a restored
// microVM's clock and seed).
func (c *Client) ReleaseWith(ctx context.Context, r protocol.Release) error {
	payload, err := releasePayload(r)
	if err != nil {
		return err
	}
	id := c.newID()
	ch := c.ask(id)
	if err := c.send(ctx, protocol.TypeRelease, id, payload); err != nil {
		return fmt.Errorf("agent: release: %w", err)
	}
	f, err := c.await(ctx, id, ch, protocol.TypeReleased)
	if err != nil {
		return err
	}
	return c.released(f)
}

// releasePayload encodes r, nothing when r is empty (what every agent
// takes).
func releasePayload(r protocol.Release) ([]byte, error) {
	if r.ClockUnixNano == 0 && len(r.Seed) == 0 {
		return nil, nil
	}
	b, err := protocol.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("agent: release: %w", err)
	}
	return b, nil
}

// released takes in the agent's Released frame f: later requests are
// numbered above every id the agent knows (another host may have used the
// sandbox since this client held it), and the commands of other hosts are
// kept to attach to.
func (c *Client) released(f protocol.Frame) error {
	var r protocol.Released
	if err := protocol.Decode(f.Payload, &r); err != nil {
		return fmt.Errorf("agent: release: %w", err)
	}
	c.keepOrphans(r.Sessions)
	for {
		cur := c.nextID.Load()
		if r.NextID <= cur+1 || c.nextID.CompareAndSwap(cur, r.NextID-1) {
			return nil
		}
	}
}

// Orphans: the tagged commands a restored agent still runs for a host
// before this client (Released.Sessions). Their frames are kept, up to
// orphanBuffer bytes each (the oldest output goes first, counted as written
// before the attach), until Attach hands them to a Process. The output of
// an orphan that keeps to flow control is acknowledged as it arrives, so
// that it runs on, unread, as it did before flow control: orphanBuffer
// bounds what is kept.

// orphanBuffer bounds the output kept for one orphan.
const orphanBuffer = 1 << 20

// orphan is a command of an earlier host, not yet attached to.
type orphan struct {
	run    protocol.Running
	frames []protocol.Frame
	size   int
	acks   acks // of its output, when it keeps to flow control
}

// keepOrphans starts keeping the frames of the commands in runs.
func (c *Client) keepOrphans(runs []protocol.Running) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range runs {
		if _, ok := c.procs[r.ID]; ok || r.Tag == "" {
			continue
		}
		if c.orphans == nil {
			c.orphans = map[uint32]*orphan{}
		}
		c.orphans[r.ID] = &orphan{run: r, acks: newAcks(r.Window)}
	}
}

// keepOrphanFrame keeps f when it is an orphan's; the caller holds c.mu.
func (c *Client) keepOrphanFrame(f protocol.Frame) bool {
	o := c.orphans[f.ID]
	if o == nil {
		return false
	}
	o.frames = append(o.frames, f)
	o.size += len(f.Payload)
	if o.run.Window > 0 && (f.Type == protocol.TypeStdout || f.Type == protocol.TypeStderr) {
		if n := o.acks.took(len(f.Payload)); n > 0 {
			go c.sendAck(protocol.TypeOutputAck, f.ID, n) // the read loop never blocks
		}
	}
	for o.size > orphanBuffer && len(o.frames) > 1 {
		old := o.frames[0]
		if old.Type != protocol.TypeStdout && old.Type != protocol.TypeStderr {
			break
		}
		o.frames = o.frames[1:]
		o.size -= len(old.Payload)
		o.run.Sent += int64(len(old.Payload))
	}
	return true
}

// Attach attaches a streamed session to the running command tagged tag
// that a host before this client started (the newest one, when several
// are), its output from now on going to output: first what it wrote since
// the restore, then what it writes. sandbox.ErrNoSession when there is
// none. The session's Offset is the output written before.
func (c *Client) Attach(tag string, output func(sandbox.Stream, []byte)) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var o *orphan
	for _, cand := range c.orphans {
		if cand.run.Tag == tag && (o == nil || cand.run.ID > o.run.ID) {
			o = cand
		}
	}
	if o == nil {
		return nil, fmt.Errorf("agent: attach %q: %w", tag, sandbox.ErrNoSession)
	}
	delete(c.orphans, o.run.ID)
	if o.run.Window > 0 && output == nil {
		output = func(sandbox.Stream, []byte) {} // its output must still be taken
	}
	p := newProcess(c, o.run.ID, streamMaxOutput, sandbox.Command{MaxOutput: streamMaxOutput, Output: output})
	p.pid, p.offset = o.run.PID, o.run.Sent
	p.mu.Lock()
	p.window = o.run.Window
	// The kept output was acknowledged as it arrived but for what is pending.
	p.preAcked = max(o.size-o.acks.pending, 0)
	p.closeStarted()
	p.mu.Unlock()
	c.procs[p.id] = p
	// Under c.mu no frame of the read loop comes between these (an ended
	// orphan is not kept, so none of them is an Exit).
	for _, f := range o.frames {
		p.onFrame(f)
	}
	return p, nil
}
