package main

import (
	"time"

	"threadbox/infra/sandbox/agent/protocol"
	"threadbox/infra/sandbox/microvm/guestinit"
)

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
			s.heldAt = time.Now()
		}
		return true
	case f.Type == protocol.TypeRelease:
		s.resumeGuest(f.Payload)
		if !s.held {
			s.outMu.Lock()
		}
		s.writeLocked(protocol.TypeReleased, f.ID, s.released())
		s.held = false
		s.outMu.Unlock()
		s.outCond.Broadcast()
		return true
	case s.held:
		s.log.Debug("agent: frame while held", "type", f.Type, "id", f.ID)
		return true
	}
	return false
}

// resumeGuest applies a Release frame's clock and seed in a microVM guest
// (the agent finished its init), whose clock stood still while it was
// saved: the frame's clock is the host's when the VM ran again, to which
// the guest adds its own monotonic time since the Hold it was saved after
// (guestinit.Resume). Elsewhere the runtime keeps the clock, and they are
// ignored. A failure is logged: the sandbox serves on.
func (s *server) resumeGuest(payload []byte) {
	if !s.cfg.vmInit || len(payload) == 0 || s.heldAt.IsZero() {
		return
	}
	var r protocol.Release
	if err := protocol.Decode(payload, &r); err != nil {
		s.log.Error("agent: release", "err", err)
		return
	}
	if r.ClockUnixNano <= 0 {
		return
	}
	if err := guestinit.Resume(r.ClockUnixNano, s.heldAt, r.Seed); err != nil {
		s.log.Error("agent: resume the guest", "err", err)
	}
}

// released returns the payload of a Released frame: the next id and the
// tagged commands running, with the output bytes written for each so far;
// they are the current host's from now on. The caller holds outMu, so no
// output is written meanwhile.
func (s *server) released() []byte {
	r := protocol.Released{NextID: s.maxID + 1}
	s.mu.Lock()
	for _, p := range s.procs {
		if p.req.Tag != "" && p.pid != 0 {
			run := protocol.Running{ID: p.id, PID: p.pid, Tag: p.req.Tag, Sent: p.written}
			if p.window != nil {
				// The host that takes the Release acks only what it reads.
				run.Window = p.req.Window
				p.window.reset()
			}
			r.Sessions = append(r.Sessions, run)
			p.gen = s.gen
		}
	}
	s.mu.Unlock()
	s.awaitRelease = false
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
	if s.procFrameLocked(p) {
		s.writeLocked(t, p.id, b)
		p.written += int64(len(b))
	}
}

// sendExit writes p's Exit frame, and says why when it could not: the
// command's connection ended, or the host's is broken.
func (s *server) sendExit(p *proc, exit protocol.Exit) (unsent string) {
	b, err := protocol.Encode(exit)
	if err != nil {
		s.log.Error("agent: encode", "type", protocol.TypeExit, "err", err)
		return "not encoded"
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if !s.procFrameLocked(p) {
		return "its connection ended"
	}
	s.writeLocked(protocol.TypeExit, p.id, b)
	if s.outBroken || s.out == nil {
		return "the host's connection is broken"
	}
	return ""
}

// procFrameLocked reports whether a frame of p may be written to the
// current host: p is its command, or a session the host took in its
// Release. A tagged session kept from an ended connection waits for the
// next host's Release; any other command of an ended connection has its
// frames dropped. The caller holds outMu.
func (s *server) procFrameLocked(p *proc) bool {
	for p.gen != s.gen {
		if !s.awaitRelease || p.req.Tag == "" {
			return false
		}
		s.outCond.Wait()
	}
	return true
}

// writeLocked writes one frame; the caller holds outMu. Without a host
// connection (between two of a dialing agent) the frame is dropped.
func (s *server) writeLocked(t protocol.Type, id uint32, payload []byte) {
	if s.outBroken || s.out == nil {
		return
	}
	if err := protocol.WriteFrame(s.out, t, id, payload); err != nil {
		s.outBroken = true
		s.log.Error("agent: write to host", "err", err)
	}
}
