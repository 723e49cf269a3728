package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
	"threadbox/domain/project"
	"threadbox/domain/thread"
)

type projectView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	OwnerID   string    `json:"owner_id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func viewProject(p project.Project) projectView {
	return projectView{p.ID(), p.Name(), p.OwnerID(), p.CreatedAt(), p.UpdatedAt()}
}

type projectRequest struct {
	Name string `json:"name"`
}

func (s *Server) createProject(c *fiber.Ctx, req projectRequest) error {
	p, err := s.svc.Workspace.CreateProject(c.UserContext(), principal(c), req.Name)
	return answerCreated(c, p, err, viewProject)
}

func (s *Server) listProjects(c *fiber.Ctx) error {
	ps, err := s.svc.Workspace.Projects(c.UserContext(), principal(c))
	return answerList(c, ps, err, viewProject)
}

func (s *Server) patchProject(c *fiber.Ctx, req projectRequest) error {
	p, err := s.svc.Workspace.RenameProject(c.UserContext(), principal(c), c.Params("id"), req.Name)
	return answer(c, p, err, viewProject)
}

type threadView struct {
	ID          string    `json:"id"`
	ProjectID   string    `json:"project_id"`
	Title       string    `json:"title"`
	ContainerID string    `json:"container_id"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Match says where a search (GET /thread?q=) found the thread.
	Match *threadMatch `json:"match,omitempty"`
}

// threadMatch is where a search found a thread: in its title, or in the
// text of a message, with the text around the match.
type threadMatch struct {
	In        string `json:"in"` // "title" or "message"
	MessageID string `json:"message_id,omitempty"`
	Snippet   string `json:"snippet,omitempty"`
}

func viewThread(t thread.Thread) threadView {
	return threadView{ID: t.ID(), ProjectID: t.ProjectID(), Title: t.Title(), ContainerID: t.ContainerID(), CreatedAt: t.CreatedAt(), UpdatedAt: t.UpdatedAt()}
}

type threadRequest struct {
	ProjectID string `json:"project_id"`
	Project   string `json:"project"`
	Title     string `json:"title"`
}

func (s *Server) createThread(c *fiber.Ctx, req threadRequest) error {
	if req.ProjectID == "" {
		req.ProjectID = req.Project
	}
	t, err := s.svc.Workspace.CreateThread(c.UserContext(), principal(c), req.ProjectID, req.Title)
	return answerCreated(c, t, err, viewThread)
}

func (s *Server) listThreads(c *fiber.Ctx) error {
	limit, err := queryLimit(c, 20, 100)
	if err != nil {
		return err
	}
	if q := c.Query("q"); q != "" {
		return s.searchThreads(c, q, limit)
	}
	page := thread.Page{Limit: limit + 1, Before: c.Query("before")}
	ts, err := s.svc.Workspace.Threads(c.UserContext(), principal(c), c.Query("project_id"), page)
	if err != nil {
		return err
	}
	more := len(ts) > limit
	if more {
		ts = ts[:limit]
	}
	return c.JSON(pageOf(views(ts, viewThread), more, threadID))
}

// searchThreads is GET /thread?q=: the caller's threads whose title or a
// message's text holds q, newest first, each with where it matched.
func (s *Server) searchThreads(c *fiber.Ctx, q string, limit int) error {
	if c.Query("before") != "" || c.Query("project_id") != "" {
		return fault.New(fault.Invalid, "q takes neither before nor project_id: a search covers every thread of the caller, newest first")
	}
	found, more, err := s.svc.Workspace.SearchThreads(c.UserContext(), principal(c), q, limit)
	if err != nil {
		return err
	}
	out := make([]threadView, len(found))
	for i, f := range found {
		out[i] = viewThread(f.Thread)
		out[i].Match = &threadMatch{In: "title"}
		if f.MessageID != "" {
			out[i].Match = &threadMatch{In: "message", MessageID: f.MessageID, Snippet: f.Snippet}
		}
	}
	return c.JSON(pageOf(out, more, threadID))
}

// threadID is the id a page of threads continues after.
func threadID(v threadView) string { return v.ID }

func (s *Server) patchThread(c *fiber.Ctx, req threadRequest) error {
	t, err := s.svc.Workspace.RetitleThread(c.UserContext(), principal(c), c.Params("id"), req.Title)
	return answer(c, t, err, viewThread)
}
