package workspace

import (
	"context"
	"unicode/utf8"

	"threadbox/app/tools"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// MaxTerminalInput is the most bytes one input to a terminal may carry
// (a paste); the terminal view sends keystrokes in small batches.
const MaxTerminalInput = 64 << 10

// auditedInput is how much of an input the audit log keeps verbatim.
const auditedInput = 1 << 10

// TerminalList is what the thread's terminal view shows: the thread's
// exec_command sessions and whether the caller may type into them.
type TerminalList struct {
	Sessions []tools.SessionInfo
	// CanType is true for the thread's owner; an admin of the org who
	// does not own the thread only watches.
	CanType bool
}

// terminalAccess resolves the thread whose terminal p asks for: its owner
// watches and types, an admin of its org watches; anyone else is told
// there is no such thread, as for every other thread route.
func (s *Service) terminalAccess(ctx context.Context, p user.Principal, threadID string) (canType bool, err error) {
	if s.d.Terminals == nil {
		return false, fault.New(fault.Unavailable, "terminal sessions are not available on this server")
	}
	_, err = s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err == nil {
		return true, nil
	}
	if !fault.Is(err, fault.NotFound) || !p.IsAdmin() {
		return false, err
	}
	if _, err := s.store.OrgThread(ctx, p.OrgID, threadID); err != nil {
		return false, err
	}
	return false, nil
}

// ThreadTerminals lists the thread's exec_command sessions kept by this
// server, oldest first.
func (s *Service) ThreadTerminals(ctx context.Context, p user.Principal, threadID string) (TerminalList, error) {
	canType, err := s.terminalAccess(ctx, p, threadID)
	if err != nil {
		return TerminalList{}, err
	}
	// A thread's container id is the thread's id.
	return TerminalList{Sessions: s.d.Terminals.Sessions(threadID), CanType: canType}, nil
}

// TerminalSession describes one of the thread's sessions.
func (s *Service) TerminalSession(ctx context.Context, p user.Principal, threadID, sessionID string) (tools.SessionInfo, bool, error) {
	canType, err := s.terminalAccess(ctx, p, threadID)
	if err != nil {
		return tools.SessionInfo{}, false, err
	}
	info, err := s.d.Terminals.Session(threadID, sessionID)
	return info, canType, err
}

// WatchTerminal sends a session's output after since (what its buffer
// still holds: the replay of a viewer who joins), then follows it until
// the session ends, answering its final description, or ctx ends.
func (s *Service) WatchTerminal(ctx context.Context, p user.Principal, threadID, sessionID string, since int64, send func(tools.Chunk) error) (tools.SessionInfo, error) {
	if _, err := s.terminalAccess(ctx, p, threadID); err != nil {
		return tools.SessionInfo{}, err
	}
	return s.d.Terminals.Watch(ctx, threadID, sessionID, since, send)
}

// TerminalInput types data into one of the thread's sessions: its owner
// only. Each input is recorded in the org's audit log
// ("terminal.input": the session, the byte count and the first KiB of
// what was typed) before it is sent; an input the log could not take is
// not sent.
func (s *Service) TerminalInput(ctx context.Context, p user.Principal, threadID, sessionID, data string) error {
	canType, err := s.terminalAccess(ctx, p, threadID)
	if err != nil {
		return err
	}
	if !canType {
		return fault.New(fault.Forbidden, "only the thread's owner may type into its terminal; others watch")
	}
	switch {
	case data == "":
		return fault.New(fault.Invalid, "data is required: the keys to type")
	case len(data) > MaxTerminalInput:
		return fault.Errorf(fault.TooLarge, "data is %d bytes, more than the %d one input may carry", len(data), MaxTerminalInput)
	}
	if _, err := s.d.Terminals.Session(threadID, sessionID); err != nil {
		return err
	}
	kept := data
	if len(kept) > auditedInput {
		kept = kept[:auditedInput]
		for !utf8.ValidString(kept) {
			kept = kept[:len(kept)-1]
		}
	}
	after := map[string]any{"session_id": sessionID, "bytes": len(data), "input": kept}
	if err := s.audit(ctx, p, "terminal.input", threadID, nil, after); err != nil {
		return err
	}
	return s.d.Terminals.Input(threadID, sessionID, []byte(data))
}
