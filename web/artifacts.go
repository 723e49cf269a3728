package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/credentials"
	"threadbox/app/workspace"
	"threadbox/domain/artifact"
	"threadbox/domain/fault"
)

type artifactView struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	ProjectID   string    `json:"project_id"`
	ThreadID    string    `json:"thread_id"`
	CreatedBy   creator   `json:"created_by"`
	ToolUseID   string    `json:"tool_use_id"`
	FileID      string    `json:"file_id"`
	Path        string    `json:"path"`
	Name        string    `json:"name"`
	MimeType    string    `json:"mime_type"`
	SizeBytes   int64     `json:"size_bytes"`
	SHA256      string    `json:"sha256"`
	Version     int       `json:"version"`
	DownloadURL string    `json:"download_url"`
	PreviewURL  string    `json:"preview_url"`
	CreatedAt   time.Time `json:"created_at"`
}

// creator is the user whose thread made an artifact; the email is empty
// when the user is unknown (an artifact saved before this was recorded).
type creator struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
}

func viewArtifact(a artifact.Artifact) artifactView {
	r := workspace.ResourceOf(a)
	return artifactView{
		ID: a.ID, Type: "artifact", ProjectID: a.ProjectID, ThreadID: a.ThreadID, CreatedBy: creator{a.CreatedBy, a.CreatorEmail}, ToolUseID: a.ToolUseID,
		FileID: r.FileID, Path: a.Path, Name: a.Name, MimeType: a.MimeType, SizeBytes: a.SizeBytes,
		SHA256: a.SHA256, Version: a.Version, DownloadURL: r.DownloadURL, PreviewURL: r.PreviewURL, CreatedAt: a.CreatedAt,
	}
}

// projectArtifacts is GET /project/{id}/artifacts: one page, oldest first
// (order=asc, the default) or newest first (order=desc), after the
// artifact id after.
func (s *Server) projectArtifacts(c *fiber.Ctx) error {
	page := artifact.Page{Limit: artifact.DefaultPage, After: c.Query("after")}
	switch c.Query("order") {
	case "", "asc":
	case "desc":
		page.NewestFirst = true
	default:
		return fault.New(fault.Invalid, "order must be 'asc' or 'desc'")
	}
	var err error
	if page.Limit, err = queryLimit(c, page.Limit, artifact.MaxPage); err != nil {
		return err
	}
	as, more, err := s.svc.Workspace.Artifacts(c.UserContext(), principal(c), c.Params("id"), page)
	if err != nil {
		return err
	}
	return c.JSON(pageOf(views(as, viewArtifact), more, func(v artifactView) string { return v.ID }))
}

// artifactContent is GET /artifact/{id}/content, gated by
// downloads.generated, served like a Files API download.
func (s *Server) artifactContent(c *fiber.Ctx) error {
	disp, err := disposition(c)
	if err != nil {
		return err
	}
	ct, err := s.svc.Workspace.ArtifactContent(c.UserContext(), principal(c), c.Params("id"))
	if err != nil {
		return err
	}
	if s.svc.Credentials.Wants(ct.File) {
		// A signed download is derived here: it is never a redirect to
		// the store, which holds the file as written.
		a, err := s.svc.Workspace.Artifact(c.UserContext(), principal(c), c.Params("id"))
		if err != nil {
			ct.Body.Close()
			return err
		}
		ct, err = s.withCredentials(c, ct, credentials.Provenance{Thread: a.ThreadID, ToolUseID: a.ToolUseID, Path: a.Path})
		if err != nil {
			return err
		}
		return sendContent(c, ct, disp)
	}
	// A live preview is never a redirect to the store, which cannot send
	// its CSP.
	if disp == "preview" && livePreview(ct.File.MIMEType) {
		return sendContent(c, ct, disp)
	}
	// With BLOB_PRESIGN the client fetches the bytes from the object
	// store, once the checks above passed; the store answers with the
	// same type and disposition, and ranges.
	sent := disp
	if sent == "preview" {
		sent = "inline"
	}
	if sent == "inline" && !ct.File.Inline {
		sent = "attachment"
	}
	u, err := s.svc.Workspace.ArtifactRedirect(c.UserContext(), ct.File, ct.File.MIMEType, contentDisposition(sent, ct.File.Filename))
	if err != nil || u != "" {
		ct.Body.Close()
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderCacheControl, "private, no-store")
		return c.Redirect(u, fiber.StatusTemporaryRedirect)
	}
	return sendContent(c, ct, disp)
}
