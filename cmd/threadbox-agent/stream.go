package main

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"threadbox/infra/sandbox/agent/protocol"
)

// maxStreamQueue bounds the bytes from the host queued for one connection
// whose reader inside the sandbox is slow; beyond it the connection is cut.
const maxStreamQueue = 8 << 20

// streams holds the loopback listeners the host asked for and the
// connections they accepted.
type streams struct {
	mu        sync.Mutex
	next      uint32
	listeners map[uint32]net.Listener
	conns     map[uint32]*streamConn
}

// streamConn is one accepted connection. Bytes from the host wait in its
// outbox, so the frame reader never blocks. Bytes to the host keep to the
// flow-control window (protocol.StreamWindow).
type streamConn struct {
	c      net.Conn
	out    *protocol.Outbox
	window *credit // closed once the host closed its end or the connection went
}

func (s *server) streamTable() *streams {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		s.st = &streams{listeners: map[uint32]net.Listener{}, conns: map[uint32]*streamConn{}}
	}
	return s.st
}

// handleStream applies a StreamOpen, StreamData or StreamClose frame.
func (s *server) handleStream(f protocol.Frame) {
	st := s.streamTable()
	switch f.Type {
	case protocol.TypeStreamOpen:
		var req protocol.Listen
		if err := protocol.Decode(f.Payload, &req); err != nil {
			s.sendError(f.ID, "listen: %v", err)
			return
		}
		l, err := listenLoopback(req.Addr)
		if err != nil {
			s.sendError(f.ID, "listen: %v", err)
			return
		}
		st.mu.Lock()
		if _, busy := st.listeners[f.ID]; busy {
			st.mu.Unlock()
			_ = l.Close()
			s.sendError(f.ID, "listen: id %d is in use", f.ID)
			return
		}
		st.listeners[f.ID] = l
		st.mu.Unlock()
		s.sendJSON(protocol.TypeStreamOpened, f.ID, protocol.Opened{Addr: l.Addr().String()})
		go s.accept(st, f.ID, l)
	case protocol.TypeStreamData:
		st.mu.Lock()
		c := st.conns[f.ID]
		st.mu.Unlock()
		if c != nil && !c.out.Push(f.Payload) {
			s.closeStream(st, f.ID, true)
		}
	case protocol.TypeStreamAck:
		var a protocol.Ack
		if protocol.Decode(f.Payload, &a) != nil {
			return
		}
		st.mu.Lock()
		c := st.conns[f.ID]
		st.mu.Unlock()
		if c != nil {
			c.window.acked(a.Bytes)
		}
	case protocol.TypeStreamClose:
		st.mu.Lock()
		l := st.listeners[f.ID]
		delete(st.listeners, f.ID)
		c := st.conns[f.ID]
		st.mu.Unlock()
		if l != nil {
			_ = l.Close()
		}
		if c != nil {
			c.out.Finish()
			c.window.close()
		}
	}
}

// listenLoopback listens on addr, refusing any host that is not loopback.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s is not a loopback address", host)
	}
	return net.Listen("tcp", addr)
}

func (s *server) accept(st *streams, lid uint32, l net.Listener) {
	for {
		nc, err := l.Accept()
		if err != nil {
			st.mu.Lock()
			_, open := st.listeners[lid]
			delete(st.listeners, lid)
			st.mu.Unlock()
			if open && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("agent: accept", "listener", lid, "err", err)
			}
			return
		}
		c := &streamConn{c: nc, out: protocol.NewOutbox(maxStreamQueue), window: newCredit(protocol.StreamWindow)}
		st.mu.Lock()
		st.next++
		id := protocol.AgentIDBit | (st.next &^ protocol.AgentIDBit)
		st.conns[id] = c
		st.mu.Unlock()
		s.sendJSON(protocol.TypeStreamOpened, id, protocol.Opened{Listener: lid, Addr: nc.RemoteAddr().String(), Window: protocol.StreamWindow})
		go c.out.Drain(c.c, nil) // what the host sends; closed once it closed its end
		go s.readStream(st, id, c)
	}
}

// readStream carries the connection's bytes to the host until it ends,
// never more than the window ahead of the host's acks.
func (s *server) readStream(st *streams, id uint32, c *streamConn) {
	buf := make([]byte, protocol.MaxChunk)
	for {
		room := c.window.room()
		n, err := c.c.Read(buf[:min(room, len(buf))])
		if n > 0 {
			c.window.sent(n)
			s.send(protocol.TypeStreamData, id, buf[:n])
		}
		if err != nil {
			s.closeStream(st, id, true)
			return
		}
	}
}

// closeStream forgets connection id, closes it and, when tell is set,
// tells the host.
func (s *server) closeStream(st *streams, id uint32, tell bool) {
	st.mu.Lock()
	c := st.conns[id]
	delete(st.conns, id)
	st.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.c.Close()
	c.out.Drop()
	c.window.close()
	if tell {
		s.send(protocol.TypeStreamClose, id, nil)
	}
}

// closeAllStreams closes every listener and connection.
func (s *server) closeAllStreams() {
	st := s.streamTable()
	st.mu.Lock()
	ls, cs := st.listeners, st.conns
	st.listeners, st.conns = map[uint32]net.Listener{}, map[uint32]*streamConn{}
	st.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	for _, c := range cs {
		_ = c.c.Close()
	}
}
