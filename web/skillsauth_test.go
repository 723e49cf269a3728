package web

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/skills"
	"threadbox/domain/fault"
	"threadbox/domain/skill"
	"threadbox/domain/user"
)

// memSkills keeps skill records in memory (skill.Repository).
type memSkills struct {
	mu sync.Mutex
	m  map[string]skill.Skill // by id
}

func (r *memSkills) CreateSkill(_ context.Context, s skill.Skill) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[s.ID] = s
	return nil
}

func (r *memSkills) Skill(_ context.Context, orgID, id string) (skill.Skill, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[id]; ok && s.OrgID == orgID {
		return s, nil
	}
	return skill.Skill{}, fault.New(fault.NotFound, "skill not found")
}

func (r *memSkills) SkillsByOrg(_ context.Context, orgID string) ([]skill.Skill, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []skill.Skill
	for _, s := range r.m {
		if s.OrgID == orgID {
			out = append(out, s)
		}
	}
	return out, nil
}

func (r *memSkills) DeleteSkill(_ context.Context, orgID, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[id]; ok && s.OrgID == orgID {
		delete(r.m, id)
	}
	return nil
}

func (r *memSkills) LatestSkill(ctx context.Context, orgID, name string) (skill.Skill, error) {
	return r.SkillVersion(ctx, orgID, name, 0)
}

// SkillVersion returns the version asked for, or the newest for 0.
func (r *memSkills) SkillVersion(_ context.Context, orgID, name string, version int) (skill.Skill, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found skill.Skill
	for _, s := range r.m {
		if s.OrgID == orgID && s.Name == name && (s.Version == version || version == 0 && s.Version > found.Version) {
			found = s
		}
	}
	if found.ID == "" {
		return skill.Skill{}, fault.New(fault.NotFound, "skill not found")
	}
	return found, nil
}

func (r *memSkills) DeleteSkillVersions(_ context.Context, orgID, name string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, s := range r.m {
		if s.OrgID == orgID && s.Name == name {
			delete(r.m, id)
			n++
		}
	}
	return n, nil
}

// TestSandboxTokensManageNoSkills deletes an org's skill through the
// Skills API as an admin's sandbox token, as code in the sandbox of an
// admin's turn could: the token acts on its own container only, so it is
// refused with 403 and the skill stays; the admin's own token deletes it.
func TestSandboxTokensManageNoSkills(t *testing.T) {
	ctx := context.Background()
	st := &memSkills{m: map[string]skill.Skill{}}
	sk := skill.Skill{ID: "skl_1", OrgID: "org_1", Name: "report", Description: "Writes reports.", Version: 1, SHA256: "00", CreatedAt: time.Now()}
	if err := st.CreateSkill(ctx, sk); err != nil {
		t.Fatal(err)
	}
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Skills: skills.New(skills.Deps{Store: st})}}
	admin := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Admin, TokenID: "tok_1", Kind: user.APIToken}
	sandbox := admin
	sandbox.TokenID, sandbox.Kind, sandbox.ContainerID = "tok_2", user.SandboxToken, "thr_1"

	del := func(p user.Principal) (int, string) {
		t.Helper()
		app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
		app.Delete("/api/gpt/v1/skills/:skill_id", func(c *fiber.Ctx) error { c.Locals(principalKey, p); return c.Next() }, srv.deleteAPISkill)
		status, typ, _ := callAs(t, app, "DELETE", "/api/gpt/v1/skills/"+skills.SkillID(sk.Name), "")
		return status, typ
	}
	if status, typ := del(sandbox); status != fiber.StatusForbidden || typ != "permission_error" {
		t.Fatalf("an admin's sandbox token deleting a skill: %d %s, want 403 permission_error", status, typ)
	}
	if _, err := st.Skill(ctx, sk.OrgID, sk.ID); err != nil {
		t.Fatalf("the skill is gone after the sandbox token's refused delete: %v", err)
	}
	if status, typ := del(admin); status != fiber.StatusOK {
		t.Fatalf("the admin deleting the skill: %d %s, want 200", status, typ)
	}
}
