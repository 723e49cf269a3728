package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// server reads frames from the host, runs commands and writes their frames
// back. Writes from every command go through one lock, one frame per Write.
type server struct {
	cfg    config
	log    *slog.Logger
	reaper *reaper
	env    []string

	outMu     sync.Mutex
	out       io.Writer
	outBroken bool
	// held is set between Hold and Release (hold.go): the serve loop then
	// keeps outMu, so that nothing else is written. Only the serve loop
	// reads or writes it, as it does maxID.
	held  bool
	maxID uint32 // the highest id the host used
	// heldAt is when the last Hold came: a microVM saved after it resumes
	// its clock from it (resumeGuest).
	heldAt time.Time
	// gen numbers the host connections of a dialing agent (dial.go); a
	// command's frames are written only while its gen is the server's.
	// awaitRelease is set from a connection's end until the next host's
	// Release, while the tagged sessions kept for it wait to be named. Both
	// are guarded by outMu; outCond (on outMu) wakes the waiting sessions.
	gen          uint64
	awaitRelease bool
	outCond      *sync.Cond

	mu    sync.Mutex
	procs map[uint32]*proc
	st    *streams // loopback listeners and their connections, made on first use

	oom      *oomCount
	nullOnce sync.Once
	null     *os.File
}

// devNull is /dev/null, opened once, for the stdin of every command that
// takes none (os/exec would open and close it for each), or nil when it
// cannot be opened (os/exec then opens it itself).
func (s *server) devNull() *os.File {
	s.nullOnce.Do(func() { s.null, _ = os.Open(os.DevNull) })
	return s.null
}

func newServer(cfg config, out io.Writer, rp *reaper, env []string, log *slog.Logger) *server {
	s := &server{cfg: cfg, log: log, reaper: rp, env: env, out: out, procs: map[uint32]*proc{}, oom: &oomCount{path: cfg.oomEvents}}
	s.outCond = sync.NewCond(&s.outMu)
	return s
}

// send writes one frame to the host. After the first write error the
// connection is considered gone and later frames are dropped.
func (s *server) send(t protocol.Type, id uint32, payload []byte) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.writeLocked(t, id, payload)
}

// sendJSON writes one frame with a JSON payload.
func (s *server) sendJSON(t protocol.Type, id uint32, v any) {
	b, err := protocol.Encode(v)
	if err != nil {
		s.log.Error("agent: encode", "type", t, "err", err)
		return
	}
	s.send(t, id, b)
}

// sendError answers request id with an Error frame.
func (s *server) sendError(id uint32, format string, args ...any) {
	s.sendJSON(protocol.TypeError, id, protocol.Error{Message: fmt.Sprintf(format, args...)})
}

// serve handles frames until in ends. It returns nil on a clean end of
// input and an error for a broken or malformed stream.
func (s *server) serve(in io.Reader) error {
	for {
		f, err := protocol.ReadFrame(in)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("agent: read frame: %w", err)
		}
		s.handle(f)
	}
}

// handle dispatches one frame. It never blocks on a command: stdin bytes
// are queued, and a command is started synchronously so that the frames
// that follow its Exec find it.
func (s *server) handle(f protocol.Frame) {
	if f.ID&protocol.AgentIDBit == 0 {
		s.maxID = max(s.maxID, f.ID)
	}
	if f.Type == protocol.TypeHangup {
		// Held or not: the host that held it is gone.
		s.hangup(f.ID)
		return
	}
	if s.hold(f) {
		return
	}
	switch f.Type {
	case protocol.TypePing:
		s.send(protocol.TypePong, f.ID, f.Payload)
	case protocol.TypeExec:
		s.cfg.lean.busy()
		var req protocol.Exec
		if err := protocol.Decode(f.Payload, &req); err != nil {
			s.sendError(f.ID, "exec: %v", err)
			return
		}
		s.mu.Lock()
		_, busy := s.procs[f.ID]
		s.mu.Unlock()
		if busy {
			s.sendError(f.ID, "exec: id %d is in use", f.ID)
			return
		}
		p, err := startProc(s, f.ID, req)
		if err != nil {
			s.sendError(f.ID, "%v", err)
			return
		}
		s.mu.Lock()
		s.procs[f.ID] = p
		s.mu.Unlock()
		started := protocol.Started{PID: p.pid}
		if p.window != nil {
			started.Window = req.Window
		}
		s.sendJSON(protocol.TypeStarted, f.ID, started)
		go p.run()
	case protocol.TypeStdin, protocol.TypeCloseStdin, protocol.TypeResize, protocol.TypeSignal:
		p := s.proc(f.ID)
		if p == nil {
			// The command may have just ended; late frames are harmless.
			s.log.Debug("agent: frame for no command", "type", f.Type, "id", f.ID)
			return
		}
		if err := p.control(f); err != nil {
			s.log.Debug("agent: control", "type", f.Type, "id", f.ID, "err", err)
		}
	case protocol.TypeOutputAck:
		var a protocol.Ack
		if p := s.proc(f.ID); p != nil && p.window != nil && protocol.Decode(f.Payload, &a) == nil {
			p.window.acked(a.Bytes)
		}
	case protocol.TypeStreamOpen, protocol.TypeStreamData, protocol.TypeStreamClose, protocol.TypeStreamAck:
		if f.Type == protocol.TypeStreamOpen {
			s.cfg.lean.busy()
		}
		s.handleStream(f)
	default:
		s.sendError(f.ID, "unsupported frame type %s", f.Type)
	}
}

func (s *server) proc(id uint32) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

func (s *server) remove(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, id)
}

// killAll sends SIGKILL to the process group of every running command and
// closes every loopback listener and connection.
func (s *server) killAll() {
	s.closeAllStreams()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
}

// attach makes out the host connection the server writes to (a dialing
// agent's next connection). When tagged sessions were kept from the
// connection before, their frames wait for this host's Release, which
// names them to it.
func (s *server) attach(out io.Writer) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.out, s.outBroken = out, false
	if s.awaitRelease && s.running(true) == 0 {
		s.awaitRelease = false
	}
}

// detach ends the host connection the server wrote to, after its serve
// loop returned: loopback listeners and their connections close, the
// untagged commands are killed and their frames dropped (nobody is left
// to read their results), and the tagged sessions (interpreters,
// terminals) go on, their output waiting for the next host's Release. A
// hold the connection ended in is over.
func (s *server) detach() {
	s.closeAllStreams()
	if !s.held {
		s.outMu.Lock()
	}
	s.held = false
	s.out = nil
	s.gen++
	s.awaitRelease = true
	s.mu.Lock()
	for _, p := range s.procs {
		if p.req.Tag == "" {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			// Nobody will ack the rest of its output, which is dropped.
			if p.window != nil {
				p.window.close()
			}
		}
	}
	s.mu.Unlock()
	s.outMu.Unlock()
	s.outCond.Broadcast()
}

// hangup ends the host connection of an agent reached through a relay
// (protocol.TypeHangup): as when a dialing agent's connection ends
// (detach), and the next host writes and reads over the same pipes, its
// frames after the answer, HungUp, which is written last.
func (s *server) hangup(id uint32) {
	// A held agent's serve loop (this one) keeps outMu.
	if !s.held {
		s.outMu.Lock()
	}
	out := s.out
	if !s.held {
		s.outMu.Unlock()
	}
	s.detach()
	s.attach(out)
	s.send(protocol.TypeHungUp, id, nil)
}

// running counts the running commands with a tag (tagged) or without.
func (s *server) running(tagged bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.procs {
		if (p.req.Tag != "") == tagged {
			n++
		}
	}
	return n
}

// drain waits up to d for every command of this server to finish (with
// untaggedOnly, every untagged one) and reports whether they did.
func (s *server) drain(d time.Duration, untaggedOnly bool) bool {
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		n := len(s.procs)
		s.mu.Unlock()
		if untaggedOnly {
			n = s.running(false)
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
