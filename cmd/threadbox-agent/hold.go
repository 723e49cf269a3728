package main

import "threadbox/infra/sandbox/agent/protocol"

// hold handles the frames of a checkpoint (protocol/hold.go) and, while
// the agent is held, every frame: it reports whether f was taken. Hold
// writes Held and keeps the output lock, so the commands' output waits;
// Release writes Released and lets it go. A held agent ignores all but
// Release: the host sends nothing else then.
func (s *server) hold(f protocol.Frame) bool {
	switch {
	case f.Type == protocol.TypeHold:
		if !s.held {
			s.outMu.Lock()
			s.writeLocked(protocol.TypeHeld, f.ID, nil)
			s.held = true
		}
		return true
	case f.Type == protocol.TypeRelease:
		if !s.held {
			s.outMu.Lock()
		}
		s.writeLocked(protocol.TypeReleased, f.ID, s.released())
		s.held = false
		s.outMu.Unlock()
		return true
	case s.held:
		s.log.Debug("agent: frame while held", "type", f.Type, "id", f.ID)
		return true
	}
	return false
}

// released returns the payload of a Released frame: the next id and the
// tagged commands running, with the output bytes written for each so far.
// The caller holds outMu, so no output is written meanwhile.
func (s *server) released() []byte {
	r := protocol.Released{NextID: s.maxID + 1}
	s.mu.Lock()
	for _, p := range s.procs {
		if p.req.Tag != "" && p.pid != 0 {
			r.Sessions = append(r.Sessions, protocol.Running{ID: p.id, PID: p.pid, Tag: p.req.Tag, Sent: p.written})
		}
	}
	s.mu.Unlock()
	payload, err := protocol.Encode(r)
	if err != nil {
		s.log.Error("agent: encode", "type", protocol.TypeReleased, "err", err)
	}
	return payload
}

// sendOutput writes one frame of p's output and counts its bytes.
func (s *server) sendOutput(p *proc, t protocol.Type, b []byte) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.writeLocked(t, p.id, b)
	p.written += int64(len(b))
}

// writeLocked writes one frame; the caller holds outMu.
func (s *server) writeLocked(t protocol.Type, id uint32, payload []byte) {
	if s.outBroken {
		return
	}
	if err := protocol.WriteFrame(s.out, t, id, payload); err != nil {
		s.outBroken = true
		s.log.Error("agent: write to host", "err", err)
	}
}
