package skills

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"threadbox/domain/audit"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/skill"
	"threadbox/domain/user"
)

// skillIDPrefix starts a Skills API skill id: the prefix and the skill's
// name, which is its identity within the org (every version keeps it).
const skillIDPrefix = "skill_"

// maxDisplayName caps a skill's display name, as the Skills API does.
const maxDisplayName = 255

// SkillID is the Skills API id of the org's skill name.
func SkillID(name string) string { return skillIDPrefix + name }

// nameOf returns the skill name a Skills API id names.
func nameOf(skillID string) (string, bool) {
	name, ok := strings.CutPrefix(skillID, skillIDPrefix)
	if !ok || skill.ValidateName(name) != nil {
		return "", false
	}
	return name, true
}

// Summary is a skill as the Skills API shows it: its versions seen as one.
type Summary struct {
	ID          string // SkillID(Name)
	Name        string
	DisplayName string // the latest version's, or the name
	Latest      skill.Skill
	CreatedAt   time.Time // the oldest version's
	UpdatedAt   time.Time // the latest version's
}

// summarize groups versions (of one org, any order) by skill, newest
// skill first.
func summarize(versions []skill.Skill) []Summary {
	by := map[string]*Summary{}
	var order []string
	for _, v := range versions {
		sm, ok := by[v.Name]
		if !ok {
			sm = &Summary{ID: SkillID(v.Name), Name: v.Name, Latest: v, CreatedAt: v.CreatedAt}
			by[v.Name] = sm
			order = append(order, v.Name)
		}
		if v.Version >= sm.Latest.Version {
			sm.Latest = v
		}
		if v.CreatedAt.Before(sm.CreatedAt) {
			sm.CreatedAt = v.CreatedAt
		}
	}
	out := make([]Summary, 0, len(order))
	for _, n := range order {
		sm := by[n]
		sm.UpdatedAt, sm.DisplayName = sm.Latest.CreatedAt, sm.Latest.DisplayName
		if sm.DisplayName == "" {
			sm.DisplayName = sm.Name
		}
		out = append(out, *sm)
	}
	slices.SortFunc(out, func(a, b Summary) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Limits returns the caps of an upload (the web layer reads uploaded
// files within them).
func (s *Service) Limits() skill.Limits { return s.limits }

// Create makes a new skill from its files (the Skills API's create): the
// files' names are their paths, under one top-level folder or none, with a
// SKILL.md whose name the org has no skill of yet. Org admins only.
func (s *Service) Create(ctx context.Context, p user.Principal, displayName string, files []skill.File) (Summary, error) {
	if len(displayName) > maxDisplayName || strings.ContainsAny(displayName, "\r\n") || !fault.Storable(displayName) {
		return Summary{}, fault.Errorf(fault.Invalid, "display_name must be one line of UTF-8 text of at most %d characters, without NUL characters", maxDisplayName)
	}
	sk, err := s.uploadFiles(ctx, p, files, uploadMode{create: true, displayName: strings.TrimSpace(displayName)})
	if err != nil {
		return Summary{}, err
	}
	return s.Get(ctx, p, SkillID(sk.Name))
}

// CreateVersion adds a version to the skill skillID names from its files;
// their SKILL.md must keep the skill's name. Org admins only.
func (s *Service) CreateVersion(ctx context.Context, p user.Principal, skillID string, files []skill.File) (skill.Skill, error) {
	name, ok := nameOf(skillID)
	if !ok {
		return skill.Skill{}, fault.Errorf(fault.NotFound, "skill not found: %s", skillID)
	}
	return s.uploadFiles(ctx, p, files, uploadMode{name: name})
}

// uploadFiles packs files into a zip archive (kept in the archive store as
// an uploaded archive is) and uploads it.
func (s *Service) uploadFiles(ctx context.Context, p user.Principal, files []skill.File, mode uploadMode) (skill.Skill, error) {
	if !p.IsAdmin() {
		return skill.Skill{}, fault.New(fault.Forbidden, "only org admins may upload skills")
	}
	if s.files == nil {
		return skill.Skill{}, fault.New(fault.Unavailable, "the skill store is not configured")
	}
	if len(files) == 0 {
		return skill.Skill{}, fault.New(fault.Invalid, "files: at least one file is required, a SKILL.md among them")
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	seen := map[string]bool{}
	tally := skill.NewTally(s.limits)
	for _, f := range files {
		clean, err := skill.CleanEntry(f.Path, skill.RegularFile)
		if err != nil {
			return skill.Skill{}, err
		}
		if clean == "" || seen[clean] {
			return skill.Skill{}, fault.Errorf(fault.Invalid, "files: %q is empty or given twice", f.Path)
		}
		seen[clean] = true
		if err := tally.Add(clean, int64(len(f.Data))); err != nil {
			return skill.Skill{}, err
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: clean, Method: zip.Deflate, Modified: s.now().UTC()})
		if err != nil {
			return skill.Skill{}, fmt.Errorf("skills: pack: %w", err)
		}
		if _, err := w.Write(f.Data); err != nil {
			return skill.Skill{}, fmt.Errorf("skills: pack: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return skill.Skill{}, fmt.Errorf("skills: pack: %w", err)
	}
	return s.upload(ctx, p, buf.Bytes(), mode)
}

// Skills returns the org's skills, newest first.
func (s *Service) Skills(ctx context.Context, p user.Principal) ([]Summary, error) {
	all, err := s.store.SkillsByOrg(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	return summarize(all), nil
}

// Get returns the skill skillID names.
func (s *Service) Get(ctx context.Context, p user.Principal, skillID string) (Summary, error) {
	versions, err := s.Versions(ctx, p, skillID)
	if err != nil {
		return Summary{}, err
	}
	return summarize(versions)[0], nil
}

// Versions returns the versions of the skill skillID names, newest first.
func (s *Service) Versions(ctx context.Context, p user.Principal, skillID string) ([]skill.Skill, error) {
	name, ok := nameOf(skillID)
	if !ok {
		return nil, fault.Errorf(fault.NotFound, "skill not found: %s", skillID)
	}
	all, err := s.store.SkillsByOrg(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	var out []skill.Skill
	for _, v := range all {
		if v.Name == name {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fault.Errorf(fault.NotFound, "skill not found: %s", skillID)
	}
	slices.SortFunc(out, func(a, b skill.Skill) int { return b.Version - a.Version })
	return out, nil
}

// Version returns one version of the skill skillID names: by its version
// id, its number, or "latest".
func (s *Service) Version(ctx context.Context, p user.Principal, skillID, version string) (skill.Skill, error) {
	versions, err := s.Versions(ctx, p, skillID)
	if err != nil {
		return skill.Skill{}, err
	}
	if version == "latest" {
		return versions[0], nil
	}
	for _, v := range versions {
		if v.ID == version || strconv.Itoa(v.Version) == version {
			return v, nil
		}
	}
	return skill.Skill{}, fault.Errorf(fault.NotFound, "skill version not found: %s", version)
}

// DeleteVersion deletes one version of a skill. A skill holds at least
// one version: its last is deleted with the skill (Delete). Org admins
// only.
func (s *Service) DeleteVersion(ctx context.Context, p user.Principal, skillID, version string) (skill.Skill, error) {
	v, err := s.Version(ctx, p, skillID, version)
	if err != nil {
		return skill.Skill{}, err
	}
	if !p.IsAdmin() {
		return skill.Skill{}, fault.New(fault.Forbidden, "only org admins may delete skills")
	}
	versions, err := s.Versions(ctx, p, skillID)
	if err != nil {
		return skill.Skill{}, err
	}
	if len(versions) == 1 {
		return skill.Skill{}, fault.Errorf(fault.Conflict, "%s is the only version of %s: a skill holds at least one version; delete the skill instead", v.ID, skillID)
	}
	if err := s.store.DeleteSkill(ctx, p.OrgID, v.ID); err != nil {
		return skill.Skill{}, err
	}
	// The archive goes when no other version shares it; the version's
	// unpacked files stay on disk, never loaded again (no record names
	// them), until the skill is deleted.
	if s.archives != nil && !slices.ContainsFunc(versions, func(o skill.Skill) bool { return o.ID != v.ID && o.SHA256 == v.SHA256 }) {
		if err := s.archives.Remove(ctx, p.OrgID, v.SHA256); err != nil {
			return skill.Skill{}, fmt.Errorf("skills: delete archive: %w", err)
		}
	}
	s.audit(ctx, p, "skills.version.delete", v.ID, map[string]any{"name": v.Name, "version": v.Version})
	return v, nil
}

// audit records a change in the org's audit log. A failure to record is
// not the change's failure: the change is made.
func (s *Service) audit(ctx context.Context, p user.Principal, action, target string, after map[string]any) {
	if s.auditor == nil {
		return
	}
	b, _ := json.Marshal(after)
	_ = s.auditor.AppendEvent(context.WithoutCancel(ctx), audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: action, Target: target, After: b, At: s.now().UTC()})
}

// Content returns one version's files as a zip archive, each under the
// skill's name as its top-level folder, whatever archive it was uploaded
// as; and the version.
func (s *Service) Content(ctx context.Context, p user.Principal, skillID, version string) ([]byte, skill.Skill, error) {
	v, err := s.Version(ctx, p, skillID, version)
	if err != nil {
		return nil, skill.Skill{}, err
	}
	if s.archives == nil {
		return nil, skill.Skill{}, fault.New(fault.Unavailable, "skill archives are not kept on this server")
	}
	rc, err := s.archives.Open(ctx, p.OrgID, v.SHA256)
	if err != nil {
		return nil, skill.Skill{}, fmt.Errorf("skills: open archive of %s v%d: %w", v.Name, v.Version, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, s.limits.MaxTotalBytes+1))
	if err != nil {
		return nil, skill.Skill{}, fmt.Errorf("skills: read archive of %s v%d: %w", v.Name, v.Version, err)
	}
	entries, err := ReadArchive(raw, s.limits)
	if err != nil {
		return nil, skill.Skill{}, fmt.Errorf("skills: read archive of %s v%d: %w", v.Name, v.Version, err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: v.Name + "/" + e.Path, Method: zip.Deflate, Modified: v.CreatedAt})
		if err != nil {
			return nil, skill.Skill{}, fmt.Errorf("skills: pack: %w", err)
		}
		if _, err := w.Write(e.Data); err != nil {
			return nil, skill.Skill{}, fmt.Errorf("skills: pack: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, skill.Skill{}, fmt.Errorf("skills: pack: %w", err)
	}
	return buf.Bytes(), v, nil
}
