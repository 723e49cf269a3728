package store

import (
	"context"
	"testing"
	"time"

	"threadbox/domain/org"
	"threadbox/domain/user"
)

// TestContainersBeforeTheSkillsMark: a container recorded before the
// skills mark existed counts as one whose folder may hold skills, so its
// first turn without skills still unloads what an earlier turn loaded.
func TestContainersBeforeTheSkillsMark(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.provider()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 28); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	o, _ := org.New("org_1", "old", now)
	u, _ := user.New("usr_1", o.ID(), "old@acme.test", user.Member, now)
	for _, err := range []error{s.Accounts().CreateOrg(ctx, o), s.Accounts().CreateUser(ctx, u)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.sqlDB.ExecContext(ctx, `INSERT INTO containers (id, client_id, org_id, owner_id, thread_id, state, backend, holder, created_at, last_active_at)
		VALUES ('ctr_old', 'old', 'org_1', 'usr_1', '', 'idle', '', '', ?, ?)`, now, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Containers().Container(ctx, "ctr_old")
	if err != nil {
		t.Fatal(err)
	}
	if !c.MayHoldSkills() {
		t.Fatal("a container recorded before the mark counts as holding no skills")
	}
}
