package main

import "sync"

// credit is a window of flow control over bytes sent to the host: a
// sender takes room before it reads what it will send, the host's acks
// give room back. Loopback connections (protocol.StreamWindow) and the
// output of streamed commands (protocol.Exec.Window) keep to one each.
type credit struct {
	size int
	wake chan struct{} // signalled when acks arrive or the window closes

	mu      sync.Mutex
	unacked int // bytes sent and not acknowledged
	closed  bool
	waiting int // room calls waiting for acks
}

func newCredit(size int) *credit {
	return &credit{size: size, wake: make(chan struct{}, 1)}
}

func (c *credit) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// room waits until the window has room or is closed, and returns how many
// bytes may be sent: at least 1 once closed, so that a reader still sees
// the end of what it reads.
func (c *credit) room() int {
	for {
		c.mu.Lock()
		r, closed := c.size-c.unacked, c.closed
		c.mu.Unlock()
		if r > 0 {
			return r
		}
		if closed {
			return 1
		}
		c.mu.Lock()
		c.waiting++
		c.mu.Unlock()
		<-c.wake
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
	}
}

// blocked reports whether a sender waits for the host's acks.
func (c *credit) blocked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting > 0
}

// sent counts n bytes sent.
func (c *credit) sent(n int) {
	c.mu.Lock()
	c.unacked += n
	c.mu.Unlock()
}

// acked gives n bytes of the window back; an ack of nothing or less is
// ignored.
func (c *credit) acked(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.unacked = max(c.unacked-n, 0)
	c.mu.Unlock()
	c.signal()
}

// reset gives the whole window back: a new host acknowledges only what it
// received itself.
func (c *credit) reset() {
	c.mu.Lock()
	c.unacked = 0
	c.mu.Unlock()
	c.signal()
}

// close stops the waiting for good: the sender is ending.
func (c *credit) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.signal()
}
