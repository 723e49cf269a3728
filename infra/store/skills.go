package store

import (
	"context"
	"time"

	"threadbox/domain/skill"
)

type skillRow struct {
	ID          string `gorm:"primaryKey"`
	OrgID       string
	Name        string
	Description string
	DisplayName string
	Version     int
	SHA256      string `gorm:"column:sha256"`
	SizeBytes   int64
	CreatedAt   time.Time
}

func (skillRow) TableName() string { return "skills" }

func (r skillRow) domain() skill.Skill {
	return skill.Skill{ID: r.ID, OrgID: r.OrgID, Name: r.Name, Description: r.Description, DisplayName: r.DisplayName, Version: r.Version, SHA256: r.SHA256, SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt.UTC()}
}

// CreateSkill stores a new skill version; a taken (org, name, version) is a
// conflict.
func (s Skills) CreateSkill(ctx context.Context, sk skill.Skill) error {
	r := skillRow{ID: sk.ID, OrgID: sk.OrgID, Name: sk.Name, Description: sk.Description, DisplayName: sk.DisplayName,
		Version: sk.Version, SHA256: sk.SHA256, SizeBytes: sk.SizeBytes, CreatedAt: sk.CreatedAt.UTC()}
	return translate(s.q(ctx).Create(&r).Error, "skill")
}

// Skill returns the org's skill version with id.
func (s Skills) Skill(ctx context.Context, orgID, id string) (skill.Skill, error) {
	return take[skillRow](s.q(ctx).Where("id = ? AND org_id = ?", id, orgID), "skill")
}

// SkillsByOrg lists every version of the org's skills by name and version.
func (s Skills) SkillsByOrg(ctx context.Context, orgID string) ([]skill.Skill, error) {
	return find[skillRow](s.q(ctx).Where("org_id = ?", orgID).Order("name, version"), "skills")
}

// DeleteSkill deletes one of the org's skill versions.
func (s Skills) DeleteSkill(ctx context.Context, orgID, id string) error {
	return one(s.q(ctx).Where("id = ? AND org_id = ?", id, orgID).Delete(&skillRow{}), "skill")
}

// LatestSkill returns the newest version of the org's skill name.
func (s Skills) LatestSkill(ctx context.Context, orgID, name string) (skill.Skill, error) {
	return take[skillRow](s.q(ctx).Where("org_id = ? AND name = ?", orgID, name).Order("version DESC"), "skill")
}

// SkillVersion returns one version of the org's skill name.
func (s Skills) SkillVersion(ctx context.Context, orgID, name string, version int) (skill.Skill, error) {
	return take[skillRow](s.q(ctx).Where("org_id = ? AND name = ? AND version = ?", orgID, name, version), "skill")
}

// DeleteSkillVersions deletes every version of the org's skill name.
func (s Skills) DeleteSkillVersions(ctx context.Context, orgID, name string) (int, error) {
	res := s.q(ctx).Where("org_id = ? AND name = ?", orgID, name).Delete(&skillRow{})
	if res.Error != nil {
		return 0, translate(res.Error, "skill")
	}
	return int(res.RowsAffected), nil
}
