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
		payload, err := protocol.Encode(protocol.Released{NextID: s.maxID + 1})
		if err != nil {
			s.log.Error("agent: encode", "type", f.Type, "err", err)
		}
		if !s.held {
			s.send(protocol.TypeReleased, f.ID, payload)
			return true
		}
		s.writeLocked(protocol.TypeReleased, f.ID, payload)
		s.held = false
		s.outMu.Unlock()
		return true
	case s.held:
		s.log.Debug("agent: frame while held", "type", f.Type, "id", f.ID)
		return true
	}
	return false
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
