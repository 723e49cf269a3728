package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/skills"
	"threadbox/domain/org"
	"threadbox/domain/skill"
	"threadbox/domain/user"
	"threadbox/infra/store"
)

// TestSandboxTokensManageNoSkills deletes an org's skill through the
// Skills API as an admin's sandbox token, as code in the sandbox of an
// admin's turn could: the token acts on its own container only, so it is
// refused with 403 and the skill stays; the admin's own token deletes it.
func TestSandboxTokensManageNoSkills(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := org.New("org_1", "acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	sk := skill.Skill{ID: "skl_1", OrgID: o.ID(), Name: "report", Description: "Writes reports.", Version: 1, SHA256: "00", CreatedAt: time.Now()}
	if err := st.Skills().CreateSkill(ctx, sk); err != nil {
		t.Fatal(err)
	}
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Skills: skills.New(skills.Deps{Store: st.Skills()})}}
	admin := user.Principal{UserID: "usr_1", OrgID: o.ID(), Role: user.Admin, TokenID: "tok_1", Kind: user.APIToken}
	sandbox := admin
	sandbox.TokenID, sandbox.Kind, sandbox.ContainerID = "tok_2", user.SandboxToken, "thr_1"

	del := func(p user.Principal) (int, string) {
		t.Helper()
		app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
		app.Delete("/api/gpt/v1/skills/:skill_id", func(c *fiber.Ctx) error { c.Locals(principalKey, p); return c.Next() }, srv.deleteAPISkill)
		resp, err := app.Test(httptest.NewRequest("DELETE", "/api/gpt/v1/skills/"+skills.SkillID(sk.Name), nil))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct{ Type string } `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		return resp.StatusCode, e.Error.Type
	}
	if status, typ := del(sandbox); status != fiber.StatusForbidden || typ != "permission_error" {
		t.Fatalf("an admin's sandbox token deleting a skill: %d %s, want 403 permission_error", status, typ)
	}
	if _, err := st.Skills().Skill(ctx, o.ID(), sk.ID); err != nil {
		t.Fatalf("the skill is gone after the sandbox token's refused delete: %v", err)
	}
	if status, typ := del(admin); status != fiber.StatusOK {
		t.Fatalf("the admin deleting the skill: %d %s, want 200", status, typ)
	}
}
