package web

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/skills"
	"threadbox/domain/fault"
	"threadbox/domain/skill"
)

// The Skills API (/api/gpt/v1/skills) in the shapes of Anthropic's: a
// skill is an org's skill name with its versions (docs/skills-api in
// docs/messages.md).

// skillsPageDefault and skillsPageMax bound a page of a skills listing.
const (
	skillsPageDefault = 20
	skillsPageMax     = 100
)

type skillSource struct {
	Type string `json:"type"`
}

// apiSkill is the Skills API's skill object.
type apiSkill struct {
	ID              string      `json:"id"`
	Type            string      `json:"type"`
	DisplayName     string      `json:"display_name"`
	LatestVersionID string      `json:"latest_version_id"`
	Source          skillSource `json:"source"`
	CreatedAt       time.Time   `json:"created_at"`
	UpdatedAt       time.Time   `json:"updated_at"`
}

func viewAPISkill(sm skills.Summary) apiSkill {
	return apiSkill{ID: sm.ID, Type: "skill", DisplayName: sm.DisplayName, LatestVersionID: sm.Latest.ID,
		Source: skillSource{Type: "custom"}, CreatedAt: sm.CreatedAt, UpdatedAt: sm.UpdatedAt}
}

// apiSkillVersion is the Skills API's skill version object.
type apiSkillVersion struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	SkillID     string    `json:"skill_id"`
	Version     string    `json:"version"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Directory   string    `json:"directory"`
	CreatedAt   time.Time `json:"created_at"`
}

func viewSkillVersion(v skill.Skill) apiSkillVersion {
	return apiSkillVersion{ID: v.ID, Type: "skill_version", SkillID: skills.SkillID(v.Name), Version: strconv.Itoa(v.Version),
		Name: v.Name, Description: v.Description, Directory: v.Name, CreatedAt: v.CreatedAt}
}

// cursorPage is a page of a Skills API listing.
type cursorPage[T any] struct {
	Data     []T     `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

// cursorPageOf cuts the page the request's limit and page (the id of the last
// item of the page before) select out of items.
func cursorPageOf[T any](c *fiber.Ctx, items []T, idOf func(T) string) (cursorPage[T], error) {
	limit, err := queryLimit(c, skillsPageDefault, skillsPageMax)
	if err != nil {
		return cursorPage[T]{}, err
	}
	start := 0
	if after := c.Query("page"); after != "" {
		start = -1
		for i, it := range items {
			if idOf(it) == after {
				start = i + 1
			}
		}
		if start < 0 {
			return cursorPage[T]{}, fault.Errorf(fault.Invalid, "page %q does not name a listed item", after)
		}
	}
	end := min(start+limit, len(items))
	out := cursorPage[T]{Data: append([]T{}, items[start:end]...), HasMore: end < len(items)}
	if out.HasMore {
		next := idOf(items[end-1])
		out.NextPage = &next
	}
	return out, nil
}

// skillFiles reads the files of a Skills API upload: every "files[]" (or
// "files") part, named by its path, and the "display_name" field; at most
// the skills' byte cap in all.
func (s *Server) skillFiles(c *fiber.Ctx) (string, []skill.File, error) {
	mt, params, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	if err != nil || mt != fiber.MIMEMultipartForm || params["boundary"] == "" {
		return "", nil, fault.New(fault.Invalid, "the request must be multipart/form-data with 'files[]' fields")
	}
	left := s.svc.Skills.Limits().MaxTotalBytes
	mr := multipart.NewReader(bodyReader(c), params["boundary"])
	var (
		display string
		files   []skill.File
	)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return display, files, nil
		}
		if err != nil {
			c.Context().SetConnectionClose()
			return "", nil, fault.Wrap(fault.Invalid, "malformed multipart body", err)
		}
		name := part.FormName()
		if name != "files[]" && name != "files" && name != "display_name" {
			if _, err := io.Copy(io.Discard, part); err != nil {
				return "", nil, fault.Wrap(fault.Invalid, "malformed multipart body", err)
			}
			continue
		}
		data, err := io.ReadAll(io.LimitReader(part, left+1))
		if err != nil {
			c.Context().SetConnectionClose()
			return "", nil, fault.Wrap(fault.Invalid, "malformed multipart body", err)
		}
		if left -= int64(len(data)); left < 0 {
			c.Context().SetConnectionClose()
			return "", nil, fault.Errorf(fault.TooLarge, "the skill's files hold more than %d bytes", s.svc.Skills.Limits().MaxTotalBytes)
		}
		if name == "display_name" {
			display = string(data)
			continue
		}
		path := partFilename(part)
		if path == "" {
			return "", nil, fault.New(fault.Invalid, "files[]: every file needs a file name, its path in the skill (my-skill/SKILL.md)")
		}
		files = append(files, skill.File{Path: strings.TrimPrefix(path, "./"), Data: data})
	}
}

// createSkill is POST /v1/skills.
func (s *Server) createSkill(c *fiber.Ctx) error {
	display, files, err := s.skillFiles(c)
	if err != nil {
		return err
	}
	sm, err := s.svc.Skills.Create(c.UserContext(), principal(c), display, files)
	return answer(c, sm, err, viewAPISkill)
}

// listAPISkills is GET /v1/skills.
func (s *Server) listAPISkills(c *fiber.Ctx) error {
	all, err := s.svc.Skills.Skills(c.UserContext(), principal(c))
	if err != nil {
		return err
	}
	switch src := c.Query("source"); src {
	case "", "custom":
	case "anthropic", "anthropic_example", "plugin":
		all = nil // this server has only its orgs' own skills
	default:
		return fault.Errorf(fault.Invalid, "source must be \"custom\" or \"anthropic\", not %q", src)
	}
	page, err := cursorPageOf(c, views(all, viewAPISkill), func(v apiSkill) string { return v.ID })
	if err != nil {
		return err
	}
	return c.JSON(page)
}

// deleteAPISkill is DELETE /v1/skills/{skill_id}: the skill with every
// version.
func (s *Server) deleteAPISkill(c *fiber.Ctx) error {
	id := c.Params("skill_id")
	if _, err := s.svc.Skills.Get(c.UserContext(), principal(c), id); err != nil {
		return err
	}
	if _, err := s.svc.Skills.Delete(c.UserContext(), principal(c), id); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"id": id, "type": "skill_deleted"})
}

// createSkillVersion is POST /v1/skills/{skill_id}/versions.
func (s *Server) createSkillVersion(c *fiber.Ctx) error {
	_, files, err := s.skillFiles(c)
	if err != nil {
		return err
	}
	v, err := s.svc.Skills.CreateVersion(c.UserContext(), principal(c), c.Params("skill_id"), files)
	return answer(c, v, err, viewSkillVersion)
}

// listSkillVersions is GET /v1/skills/{skill_id}/versions, newest first.
func (s *Server) listSkillVersions(c *fiber.Ctx) error {
	vs, err := s.svc.Skills.Versions(c.UserContext(), principal(c), c.Params("skill_id"))
	if err != nil {
		return err
	}
	page, err := cursorPageOf(c, views(vs, viewSkillVersion), func(v apiSkillVersion) string { return v.ID })
	if err != nil {
		return err
	}
	return c.JSON(page)
}

// getSkillVersion is GET /v1/skills/{skill_id}/versions/{version}: by
// version id, number or "latest".
func (s *Server) getSkillVersion(c *fiber.Ctx) error {
	v, err := s.svc.Skills.Version(c.UserContext(), principal(c), c.Params("skill_id"), c.Params("version"))
	return answer(c, v, err, viewSkillVersion)
}

// deleteSkillVersion is DELETE /v1/skills/{skill_id}/versions/{version}.
func (s *Server) deleteSkillVersion(c *fiber.Ctx) error {
	v, err := s.svc.Skills.DeleteVersion(c.UserContext(), principal(c), c.Params("skill_id"), c.Params("version"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"id": v.ID, "type": "skill_version_deleted"})
}

// skillVersionContent is GET /v1/skills/{skill_id}/versions/{version}/content:
// the version's files as a zip archive.
func (s *Server) skillVersionContent(c *fiber.Ctx) error {
	zipped, v, err := s.svc.Skills.Content(c.UserContext(), principal(c), c.Params("skill_id"), c.Params("version"))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "application/zip")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentDisposition, contentDisposition("attachment", v.Name+".zip"))
	return c.Send(zipped)
}
