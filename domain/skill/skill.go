// Package skill holds skills: folders with a SKILL.md that an org uploads,
// loaded read-only into sandboxes that ask for them.
package skill

import (
	"context"
	"time"
)

// Skill is one uploaded version of a skill.
type Skill struct {
	ID          string
	OrgID       string
	Name        string
	Description string
	Version     int
	SHA256      string
	CreatedAt   time.Time
}

// Repository stores skills, scoped by org.
type Repository interface {
	CreateSkill(ctx context.Context, s Skill) error
	Skill(ctx context.Context, orgID, id string) (Skill, error)
	SkillsByOrg(ctx context.Context, orgID string) ([]Skill, error)
	DeleteSkill(ctx context.Context, orgID, id string) error
}
