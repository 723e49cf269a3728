package web

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/credentials"
	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/workspace"
	"threadbox/domain/fault"
	"threadbox/domain/jsonfield"
	"threadbox/domain/thread"
	turnpkg "threadbox/domain/turn"
)

// threadUpload is POST /thread/{threadId}/upload-file: multipart "file",
// optional "path", into the thread's container.
func (s *Server) threadUpload(c *fiber.Ctx) error {
	threadID := c.Params("id")
	return s.receiveUpload(c, func(req files.UploadRequest) (files.File, error) {
		req.Limit = s.maxUpload
		return s.svc.Workspace.UploadFile(c.UserContext(), principal(c), threadID, req)
	})
}

// threadPut is PUT /thread/{threadId}/put-file/{path}: the raw body at the
// key, taken from the raw request path.
func (s *Server) threadPut(c *fiber.Ctx) error {
	_, tail, ok := strings.Cut(string(c.Request().URI().PathOriginal()), "/put-file/")
	key, err := putKey(tail, ok, "a path is required: PUT /api/v1/app/thread/{threadId}/put-file/{path}")
	if err != nil {
		return err
	}
	f, err := s.svc.Workspace.PutFile(c.UserContext(), principal(c), c.Params("id"), key, bodyReader(c), s.maxUpload)
	return answer(c, f, err, viewFile)
}

// threadDownload is GET /thread/{threadId}/download-file?path=<sandbox path>.
func (s *Server) threadDownload(c *fiber.Ctx) error {
	disp, err := disposition(c)
	if err != nil {
		return err
	}
	if c.Query("path") == "" {
		return fault.New(fault.Invalid, "path is required: the file's sandbox path, e.g. /mnt/user-data/outputs/chart.png")
	}
	ct, err := s.svc.Workspace.DownloadFile(c.UserContext(), principal(c), c.Params("id"), c.Query("path"))
	if err != nil {
		return err
	}
	if ct, err = s.withCredentials(c, ct, credentials.Provenance{Thread: c.Params("id")}); err != nil {
		return err
	}
	return sendContent(c, ct, disp)
}

// turnRequest is the body of a rewind, and the optional body of a fork:
// the assistant message whose turn the thread goes back to.
type turnRequest struct {
	MessageID *string `json:"message_id"`
}

// forkThread is POST /thread/{threadId}/fork: the whole thread, or with a
// body naming message_id the thread as that turn left it.
func (s *Server) forkThread(c *fiber.Ctx, req turnRequest) error {
	if req.MessageID != nil && *req.MessageID == "" {
		return fault.New(fault.Invalid, "message_id: must name an assistant message of the thread (leave it out to fork the whole thread)")
	}
	at := ""
	if req.MessageID != nil {
		at = *req.MessageID
	}
	t, err := s.svc.Workspace.ForkThread(c.UserContext(), principal(c), c.Params("id"), at)
	return answerCreated(c, t, err, viewThread)
}

// rewoundView is a rewind's response.
type rewoundView struct {
	Thread     threadView `json:"thread"`
	MessageID  string     `json:"message_id"`
	SnapshotID string     `json:"snapshot_id"`
	Replaced   []string   `json:"replaced"`
	Files      int        `json:"files"`
	// Note says what of the turn the rewind could not give back: its
	// running state; absent when the rewind is whole.
	Note string `json:"note,omitempty"`
}

// rewindThread is POST /thread/{threadId}/rewind: the thread back to the
// turn of message_id, its files and its history.
func (s *Server) rewindThread(c *fiber.Ctx, req turnRequest) error {
	if req.MessageID == nil || *req.MessageID == "" {
		return fault.New(fault.Invalid, "message_id: required (an assistant message of the thread)")
	}
	r, err := s.svc.Workspace.RewindThread(c.UserContext(), principal(c), c.Params("id"), *req.MessageID)
	if err != nil {
		return err
	}
	return c.JSON(rewoundView{Thread: viewThread(r.Thread), MessageID: r.MessageID, SnapshotID: r.SnapshotID, Replaced: r.Replaced, Files: r.Files, Note: r.Note})
}

type messageView struct {
	ID       string          `json:"id"`
	ThreadID string          `json:"thread_id"`
	Seq      int64           `json:"seq"`
	Role     string          `json:"role"`
	Content  json.RawMessage `json:"content"`
	Usage    rawJSON         `json:"usage"`
	Complete bool            `json:"complete"`
	Status   string          `json:"status"` // complete, running, stopped or failed
	// EndDetail says why a failed turn failed ("" when not known: its
	// server stopped or died mid-turn).
	EndDetail string    `json:"end_detail,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Replaced tells an earlier version: a message a later turn replaced
	// (edit-and-resend, regenerate), no longer in the model's history.
	Replaced bool `json:"replaced,omitempty"`
}

// viewMessage shows m; running tells that an incomplete m's turn still runs.
func viewMessage(m thread.Message, running bool) messageView {
	status := "complete"
	switch {
	case m.Complete():
	case running:
		status = "running"
	case m.Ended().Reason == thread.Stopped:
		status = "stopped"
	default:
		status = "failed"
	}
	return messageView{m.ID(), m.ThreadID(), m.Seq(), string(m.Role()), m.Content(), m.Usage(), m.Complete(), status, m.Ended().Detail, m.CreatedAt(), m.Replaced()}
}

// threadMessages is GET /thread/{threadId}/messages: the stored history.
// An assistant message whose turn never ended has complete false, and
// status running while its turn runs (on any server), stopped when the
// user stopped it (or went away), failed once it cannot end any more (the
// turn failed, with end_detail saying why, or its server stopped or died).
func (s *Server) threadMessages(c *fiber.Ctx) error {
	ms, running, err := s.svc.Workspace.Messages(c.UserContext(), principal(c), c.Params("id"))
	if err != nil {
		return err
	}
	out := make([]messageView, len(ms))
	for i, m := range ms {
		out[i] = viewMessage(m, running && i == len(ms)-1)
	}
	resp := threadMessagesResponse{listResponse: listResponse[messageView]{Data: out}}
	if running {
		if t, err := s.svc.Workspace.RunningTurn(c.UserContext(), principal(c), c.Params("id")); err == nil {
			resp.RunningTurnID = t.ID()
		}
	}
	return c.JSON(resp)
}

// threadMessagesResponse is the thread's messages and, while a turn runs,
// its id: a client reattaches to it (…/turns/{turn_id}/events).
type threadMessagesResponse struct {
	listResponse[messageView]
	RunningTurnID string `json:"running_turn_id,omitempty"`
}

// turnBody is the body of POST /thread/{threadId}/messages.
type turnBody struct {
	Content json.RawMessage `json:"content"`
	Skills  []string        `json:"skills"`
	Pgpt    *struct {
		Tools []workspace.AskedTool `json:"tools"`
	} `json:"pgpt"`
	Stream bool   `json:"stream"`
	Model  string `json:"model"`
	// Replace: "last_turn" (edit-and-resend) or "last_answer" (regenerate,
	// without content); see workspace.TurnRequest.
	Replace string `json:"replace"`
}

// threadTurn is POST /thread/{threadId}/messages: one chat turn, answered
// as a Messages API response or, with stream, as its event stream.
func (s *Server) threadTurn(c *fiber.Ctx, b turnBody) error {
	var um wire.Message
	switch {
	case len(b.Content) == 0 && b.Replace == workspace.ReplaceLastAnswer:
		// A regenerate asks the stored last user message again.
	case len(b.Content) == 0:
		return fault.New(fault.Invalid, "content: required (a string or an array of content blocks)")
	default:
		// The content as a user message's: a value of the wrong type is
		// named by the same path as in the body, under "content".
		if err := jsonfield.Unmarshal([]byte(`{"role":"user","content":`+string(b.Content)+`}`), &um); err != nil {
			return bodyError("content: must be a string or an array of content blocks", err, jsonErr)
		}
	}
	tr := workspace.TurnRequest{Content: um.Content, Skills: b.Skills, Model: b.Model, Stream: b.Stream, Replace: b.Replace}
	if b.Pgpt != nil {
		tr.Tools = b.Pgpt.Tools
	}
	ctx, p, threadID := c.UserContext(), principal(c), c.Params("id")
	turn, err := s.svc.Workspace.StartTurn(ctx, p, threadID, tr)
	if err != nil {
		return err
	}
	// The turn runs in the server from now on; this request follows its
	// log as any client may (GET …/turns/{turn_id}/events), and a client
	// that goes away leaves it running.
	turnID, err := turn.Detach(ctx)
	if err != nil {
		return err
	}
	c.Set(TurnIDHeader, turnID)
	ws := s.svc.Workspace
	return s.answerTurn(c, b.Stream, func(ctx context.Context, sink messages.Sink) error {
		end, err := ws.FollowTurn(ctx, p, threadID, turnID, 0, func(ev turnpkg.Event) error {
			var me wire.Event
			if err := me.UnmarshalJSON(ev.Data); err != nil {
				return fmt.Errorf("web: turn event %d: %w", ev.Seq, err)
			}
			return sink.Send(me)
		})
		if err != nil {
			return err
		}
		return end.Err
	}, "chat")
}

// TurnIDHeader names the header that gives a chat turn's id, with which a
// client follows (…/turns/{turn_id}/events) or stops it.
const TurnIDHeader = "Threadbox-Turn-Id"

// turnEvents is GET /thread/{threadId}/turns/{turnId}/events: the turn's
// event log as Server-Sent Events, each with its number as the event id,
// replayed after Last-Event-ID (or ?after=) and then followed live until
// the turn ends: a failed turn's stream ends with an error event, a
// stopped one's with a stopped event. A number beyond the log replays
// nothing. Followed from the start, the stream's first event is the
// turn's message_start: no ping comes before it.
func (s *Server) turnEvents(c *fiber.Ctx) error {
	p, threadID, turnID := principal(c), c.Params("id"), c.Params("turn")
	ws := s.svc.Workspace
	exists := func() error {
		_, err := ws.Turn(c.UserContext(), p, threadID, turnID)
		return err
	}
	return s.followSSE(c, true, exists, func(ctx context.Context, w *sseWriter, after int64) {
		end, err := ws.FollowTurn(ctx, p, threadID, turnID, after, func(ev turnpkg.Event) error {
			return w.raw(ev.Seq, ev.Type, ev.Data)
		})
		switch {
		case err != nil:
			return // the client went away, or the log could not be read
		case end.Err != nil:
			ev := s.errorEvent("chat", end.Err)
			_ = w.Event(ev.Type, ev)
		}
	})
}

// lastEventID reads where a follower resumes: the Last-Event-ID header
// or the after query parameter, 0 (the start) when neither is given.
func lastEventID(c *fiber.Ctx) (int64, error) {
	v := c.Get("Last-Event-ID")
	if v == "" {
		v = c.Query("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fault.Errorf(fault.Invalid, "Last-Event-ID: %q is not an event number", v)
	}
	return n, nil
}

type turnView struct {
	Type     string    `json:"type"` // "turn"
	ID       string    `json:"id"`
	ThreadID string    `json:"thread_id"`
	State    string    `json:"state"`
	Created  time.Time `json:"created_at"`
}

// stopTurn is POST /thread/{threadId}/turns/{turnId}/stop: the running
// command is killed, what the turn produced is kept, its log ends with a
// stopped event. A turn that already ended is answered as it is.
func (s *Server) stopTurn(c *fiber.Ctx) error {
	t, err := s.svc.Workspace.StopTurn(c.UserContext(), principal(c), c.Params("id"), c.Params("turn"))
	if err != nil {
		return err
	}
	return c.JSON(turnView{Type: "turn", ID: t.ID(), ThreadID: t.ThreadID(), State: string(t.State()), Created: t.CreatedAt()})
}
