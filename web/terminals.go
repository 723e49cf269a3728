package web

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/tools"
)

// terminalView is an exec_command session of a thread.
type terminalView struct {
	Type      string    `json:"type"` // "terminal_session"
	ID        string    `json:"id"`
	Command   string    `json:"command"`
	PID       int       `json:"pid"`
	Rows      int       `json:"rows"`
	Cols      int       `json:"cols"`
	StartedAt time.Time `json:"started_at"`
	Status    string    `json:"status"`
	ExitCode  *int      `json:"exit_code"`
	Cursor    int64     `json:"cursor"`
}

func viewTerminal(i tools.SessionInfo) terminalView {
	return terminalView{
		Type: "terminal_session", ID: i.ID, Command: i.Command, PID: i.PID, Rows: i.Rows, Cols: i.Cols,
		StartedAt: i.StartedAt.UTC(), Status: i.Status, ExitCode: i.ExitCode, Cursor: i.Cursor,
	}
}

// terminalList is the answer of GET /thread/{id}/terminals.
type terminalList struct {
	listResponse[terminalView]
	// CanType tells the caller whether they may type (the thread's
	// owner) or only watch (an admin of the org).
	CanType bool `json:"can_type"`
}

// threadTerminals is GET /thread/{threadId}/terminals: the thread's
// exec_command sessions, running or ended and not yet read by the model.
func (s *Server) threadTerminals(c *fiber.Ctx) error {
	l, err := s.svc.Workspace.ThreadTerminals(c.UserContext(), principal(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(terminalList{listResponse: listResponse[terminalView]{Data: views(l.Sessions, viewTerminal)}, CanType: l.CanType})
}

// terminalChunk is the data of an output event: raw terminal bytes,
// base64 in JSON.
type terminalChunk struct {
	Data    []byte `json:"data"`
	Cursor  int64  `json:"cursor"`
	Dropped int64  `json:"dropped_bytes,omitempty"`
}

// terminalOutput is GET /thread/{threadId}/terminals/{sessionId}/output:
// the session's output as Server-Sent Events. It replays what the
// session's buffer holds after Last-Event-ID (or ?after=, 0 when neither
// is given), then follows the output live; each output event's id is the
// byte cursor after it, so a reconnecting EventSource resumes where it
// stopped. The stream ends with an exit event when the session ends.
func (s *Server) terminalOutput(c *fiber.Ctx) error {
	p, threadID, sessionID := principal(c), c.Params("id"), c.Params("session")
	ws := s.svc.Workspace
	exists := func() error {
		_, _, err := ws.TerminalSession(c.UserContext(), p, threadID, sessionID)
		return err
	}
	return s.followSSE(c, false, exists, func(ctx context.Context, w *sseWriter, after int64) {
		end, err := ws.WatchTerminal(ctx, p, threadID, sessionID, after, func(ch tools.Chunk) error {
			data, err := json.Marshal(terminalChunk{Data: ch.Data, Cursor: ch.Cursor, Dropped: ch.Dropped})
			if err != nil {
				return err
			}
			return w.raw(ch.Cursor, "output", data)
		})
		if err != nil {
			return // the client went away, or the session is gone
		}
		_ = w.Event("exit", viewTerminal(end))
	})
}

// terminalInputBody is the body of POST .../terminals/{sessionId}/input.
type terminalInputBody struct {
	Data string `json:"data"`
}

// terminalInput is POST /thread/{threadId}/terminals/{sessionId}/input:
// keys typed into the session by the thread's owner, recorded in the
// audit log; anyone else is refused.
func (s *Server) terminalInput(c *fiber.Ctx, b terminalInputBody) error {
	if err := s.svc.Workspace.TerminalInput(c.UserContext(), principal(c), c.Params("id"), c.Params("session"), b.Data); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"type": "terminal_input", "session_id": c.Params("session"), "bytes": len(b.Data)})
}
