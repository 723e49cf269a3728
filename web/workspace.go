package web

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/app/workspace"
	"threadbox/domain/fault"
	"threadbox/domain/thread"
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
	raw := string(c.Request().URI().PathOriginal())
	_, tail, ok := strings.Cut(raw, "/put-file/")
	if !ok || tail == "" {
		return fault.New(fault.Invalid, "a path is required: PUT /api/v1/app/thread/{threadId}/put-file/{path}")
	}
	key, err := pathKey(tail)
	if err != nil {
		return err
	}
	body := bodyReader(c)
	defer body.finish(c)
	f, err := s.svc.Workspace.PutFile(c.UserContext(), principal(c), c.Params("id"), key, body, s.maxUpload)
	if err != nil {
		return err
	}
	return c.JSON(viewFile(f))
}

// threadDownload is GET /thread/{threadId}/download-file?path=<sandbox path>.
func (s *Server) threadDownload(c *fiber.Ctx) error {
	disp := c.Query("disposition", "attachment")
	if disp != "attachment" && disp != "inline" {
		return fault.New(fault.Invalid, "disposition must be 'inline' or 'attachment'")
	}
	if c.Query("path") == "" {
		return fault.New(fault.Invalid, "path is required: the file's sandbox path, e.g. /mnt/user-data/outputs/chart.png")
	}
	ct, err := s.svc.Workspace.DownloadFile(c.UserContext(), principal(c), c.Params("id"), c.Query("path"))
	if err != nil {
		return err
	}
	return sendContent(c, ct, disp)
}

// forkThread is POST /thread/{threadId}/fork.
func (s *Server) forkThread(c *fiber.Ctx) error {
	t, err := s.svc.Workspace.ForkThread(c.UserContext(), principal(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(viewThread(t))
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
	return messageView{m.ID(), m.ThreadID(), m.Seq(), string(m.Role()), m.Content(), m.Usage(), m.Complete(), status, m.Ended().Detail, m.CreatedAt()}
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
	return c.JSON(listResponse[messageView]{Data: out})
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
}

// threadTurn is POST /thread/{threadId}/messages: one chat turn, answered
// as a Messages API response or, with stream, as its event stream.
func (s *Server) threadTurn(c *fiber.Ctx) error {
	var b turnBody
	if err := parseJSON(c, &b); err != nil {
		return err
	}
	var um messages.Message
	if len(b.Content) == 0 {
		return fault.New(fault.Invalid, "content: required (a string or an array of content blocks)")
	}
	if err := json.Unmarshal([]byte(`{"role":"user","content":`+string(b.Content)+`}`), &um); err != nil {
		return fault.Errorf(fault.Invalid, "content: must be a string or an array of content blocks: %s", jsonErr(err))
	}
	tr := workspace.TurnRequest{Content: um.Content, Skills: b.Skills, Model: b.Model, Stream: b.Stream}
	if b.Pgpt != nil {
		tr.Tools = b.Pgpt.Tools
	}
	turn, err := s.svc.Workspace.StartTurn(c.UserContext(), principal(c), c.Params("id"), tr)
	if err != nil {
		return err
	}
	return s.answerTurn(c, b.Stream, func(ctx context.Context, sink messages.Sink) error {
		_, err := turn.Run(ctx, sink)
		return err
	}, "chat")
}
