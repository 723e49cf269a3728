package web

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
	"threadbox/domain/skill"
)

type skillView struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Version     int       `json:"version"`
	SHA256      string    `json:"sha256"`
	CreatedAt   time.Time `json:"created_at"`
}

func viewSkill(sk skill.Skill) skillView {
	return skillView{sk.ID, "skill", sk.Name, sk.Description, sk.Version, sk.SHA256, sk.CreatedAt}
}

// uploadSkill is POST /skills: a zip or tar archive as the raw body, or as
// the multipart field "file". Org admins only; each upload is a new version.
func (s *Server) uploadSkill(c *fiber.Ctx) error {
	var archive io.Reader = bodyReader(c)
	if mt, params, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType)); err == nil && mt == fiber.MIMEMultipartForm {
		mr := multipart.NewReader(archive, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return fault.New(fault.Invalid, "multipart field 'file' is required")
			}
			if err != nil {
				c.Context().SetConnectionClose()
				return fault.Wrap(fault.Invalid, "malformed multipart body", err)
			}
			if part.FormName() == "file" {
				archive = part
				break
			}
		}
	}
	sk, err := s.svc.Skills.Upload(c.UserContext(), principal(c), archive)
	if err != nil {
		c.Context().SetConnectionClose()
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(viewSkill(sk))
}

// listSkills is GET /skills: every version of the org's skills.
func (s *Server) listSkills(c *fiber.Ctx) error {
	sks, err := s.svc.Skills.List(c.UserContext(), principal(c))
	return answerList(c, sks, err, viewSkill)
}

// deleteSkill is DELETE /skills/{id}: the skill, every version of it.
func (s *Server) deleteSkill(c *fiber.Ctx) error {
	sk, err := s.svc.Skills.Delete(c.UserContext(), principal(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"id": sk.ID, "name": sk.Name, "type": "skill_deleted"})
}
