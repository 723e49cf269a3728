package web

import (
	"github.com/gofiber/fiber/v2"

	"threadbox/app/workspace"
)

// fileChangeView is one path a tool call changed; sizes are null on the
// side where the file is absent.
type fileChangeView struct {
	Path        string `json:"path"`
	Op          string `json:"op"`
	SizeBefore  *int64 `json:"size_before"`
	SizeAfter   *int64 `json:"size_after"`
	Link        bool   `json:"link,omitempty"`
	Text        *bool  `json:"text,omitempty"`
	Diff        string `json:"diff,omitempty"`
	DiffOmitted string `json:"diff_omitted,omitempty"`
}

// callChangesView is what one tool call changed.
type callChangesView struct {
	CallID     string           `json:"call_id"`
	MessageID  string           `json:"message_id"`
	SnapshotID string           `json:"snapshot_id"`
	Changes    []fileChangeView `json:"changes"`
}

func viewCallChanges(cc workspace.CallChanges, diffs bool) callChangesView {
	v := callChangesView{CallID: cc.CallID, MessageID: cc.MessageID, SnapshotID: cc.SnapshotID, Changes: []fileChangeView{}}
	for _, c := range cc.Changes {
		f := fileChangeView{Path: c.Path, Op: c.Op}
		if c.Before != nil {
			f.SizeBefore = &c.Before.Size
			f.Link = f.Link || c.Before.Link != ""
		}
		if c.After != nil {
			f.SizeAfter = &c.After.Size
			f.Link = f.Link || c.After.Link != ""
		}
		if diffs {
			text := c.Text
			f.Text, f.Diff, f.DiffOmitted = &text, c.Diff, c.DiffOmitted
		}
		v.Changes = append(v.Changes, f)
	}
	return v
}

// threadChanges is GET /thread/{threadId}/changes: the paths each sandbox
// tool call of the thread changed, without diffs, oldest call first.
func (s *Server) threadChanges(c *fiber.Ctx) error {
	all, err := s.svc.Workspace.ThreadChanges(c.UserContext(), principal(c), c.Params("id"))
	if err != nil {
		return err
	}
	out := []callChangesView{}
	for _, cc := range all {
		out = append(out, viewCallChanges(cc, false))
	}
	return c.JSON(fiber.Map{"data": out})
}

// callChanges is GET /thread/{threadId}/calls/{callId}/changes: what one
// call changed, with a unified diff of each text file.
func (s *Server) callChanges(c *fiber.Ctx) error {
	cc, err := s.svc.Workspace.ToolCallChanges(c.UserContext(), principal(c), c.Params("id"), c.Params("callId"))
	if err != nil {
		return err
	}
	return c.JSON(viewCallChanges(cc, true))
}

// revertRequest is the optional body of a revert.
type revertRequest struct {
	Force bool `json:"force"`
}

// revertCall is POST /thread/{threadId}/calls/{callId}/revert: the files
// the call changed given back as they were before it.
func (s *Server) revertCall(c *fiber.Ctx, req revertRequest) error {
	r, err := s.svc.Workspace.RevertToolCall(c.UserContext(), principal(c), c.Params("id"), c.Params("callId"), req.Force)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"call_id": r.CallID, "restored": r.Restored, "forced": r.Forced})
}
