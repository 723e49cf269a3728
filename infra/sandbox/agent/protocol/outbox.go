package protocol

import (
	"io"
	"sync"
)

// Outbox holds the bytes bound for one stream connection's peer, written
// by a goroutine of their own (Next), so that the frame reader that
// receives them never blocks on a slow peer. Both ends of a stream use
// one: the agent for what the host sends into the sandbox, the host for
// what the agent sends out.
type Outbox struct {
	max  int
	wake chan struct{}

	mu      sync.Mutex
	queue   [][]byte
	queued  int
	closing bool
}

// NewOutbox returns an empty outbox that holds at most max bytes.
func NewOutbox(max int) *Outbox {
	return &Outbox{max: max, wake: make(chan struct{}, 1)}
}

func (o *Outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Push queues b, unless the outbox has ended (b is then dropped). It
// reports false when b would make it hold more than its bound: the
// connection is to be cut.
func (o *Outbox) Push(b []byte) bool {
	o.mu.Lock()
	defer o.signal()
	defer o.mu.Unlock()
	if o.closing {
		return true
	}
	if o.queued+len(b) > o.max {
		return false
	}
	o.queue = append(o.queue, b)
	o.queued += len(b)
	return true
}

// Finish ends the outbox once what it holds has been taken.
func (o *Outbox) Finish() {
	o.mu.Lock()
	o.closing = true
	o.mu.Unlock()
	o.signal()
}

// Drop ends the outbox at once, dropping what it holds.
func (o *Outbox) Drop() {
	o.mu.Lock()
	o.closing, o.queue, o.queued = true, nil, 0
	o.mu.Unlock()
	o.signal()
}

// Closing reports whether the outbox has ended (Finish or Drop).
func (o *Outbox) Closing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closing
}

// Drain writes what the outbox takes to w, in order, calling wrote (when
// not nil) with the size of each chunk written, and closes w once the
// outbox has ended or a write failed.
func (o *Outbox) Drain(w io.WriteCloser, wrote func(n int)) {
	defer w.Close()
	for {
		q, done := o.Next()
		for _, b := range q {
			if _, err := w.Write(b); err != nil {
				return
			}
			if wrote != nil {
				wrote(len(b))
			}
		}
		if done {
			return
		}
	}
}

// Next waits until the outbox holds bytes and takes them all, in the order
// they were pushed; done, with none, once it has ended and is empty.
func (o *Outbox) Next() (chunks [][]byte, done bool) {
	for {
		o.mu.Lock()
		q, closing := o.queue, o.closing
		o.queue, o.queued = nil, 0
		o.mu.Unlock()
		if len(q) > 0 {
			return q, false
		}
		if closing {
			return nil, true
		}
		<-o.wake
	}
}
