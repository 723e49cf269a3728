// Package skills keeps an org's skills — versioned folders of files with a
// SKILL.md — and loads them into containers: uploads checked before
// anything is written, the latest or a named version found by name or id,
// and the prompt that tells the model what a turn loaded. The Messages API
// (container.skills) and the chat (skills of a turn) both use it.
package skills

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/domain/audit"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/skill"
	"threadbox/domain/user"
)

// manifestName is the file every skill holds.
const manifestName = "SKILL.md"

// Load is one skill version to load into a container.
type Load struct {
	OrgID   string
	Name    string
	Version int
}

// Files keeps skill versions' files and loads them into containers
// (infra/skillfs.Store, adapted).
type Files interface {
	// Save writes one version's files, all or nothing.
	Save(ctx context.Context, orgID, name string, version int, files []skill.File) error
	// Delete removes every version's files of a skill.
	Delete(ctx context.Context, orgID, name string) error
	// Sync makes the container's /mnt/skills hold exactly loads.
	Sync(ctx context.Context, containerID string, loads []Load) error
	// Has reports whether one version's files are stored here.
	Has(ctx context.Context, orgID, name string, version int) (bool, error)
}

// Archives keeps the uploaded archive of every skill version in the
// object store every server shares (infra/blob, one namespace per org,
// keyed by the archive's SHA-256), so a server whose disk lacks a
// version's files (another host, a lost volume) restores them from it.
type Archives interface {
	// Put stores an archive and returns its hex SHA-256.
	Put(ctx context.Context, orgID string, r io.Reader) (string, error)
	// Open opens the archive with the given SHA-256.
	Open(ctx context.Context, orgID, sha256 string) (io.ReadCloser, error)
	// Remove deletes the archive with the given SHA-256 (missing: no error).
	Remove(ctx context.Context, orgID, sha256 string) error
}

// Quota checks the org's storage quota (app/quota.Service).
type Quota interface {
	// BeforeStore refuses (fault.TooLarge, naming the quota) storing n
	// more bytes past the org's storage quota.
	BeforeStore(ctx context.Context, orgID string, n int64) error
}

// Locks are named locks that every server on one database shares
// (infra/store.Locks: PostgreSQL advisory locks).
type Locks interface {
	// Lock waits for the lock named key and returns the function that
	// gives it back.
	Lock(ctx context.Context, key string) (release func(), err error)
}

// Deps is what the skills use case is built from. Store is required; a
// zero Limits means skill.DefaultLimits().
type Deps struct {
	// Store keeps the skill records (required).
	Store skill.Repository
	// Files keeps the skills' files; nil is a server without a skill store
	// (uploads and loads answer unavailable).
	Files Files
	// Limits bound an uploaded archive.
	Limits skill.Limits
	// Locks make two uploads of one skill on two servers of one database
	// get distinct versions; nil: only those on this process do.
	Locks Locks
	// Archives, when set, keeps every uploaded version's archive in the
	// object store and restores from it the files of a version this
	// server's disk lacks.
	Archives Archives
	// Quota, when set, makes every upload count toward the org's storage
	// quota: its files' bytes must fit.
	Quota Quota
	// Audit, when set, records every upload and delete in the org's
	// audit log.
	Audit Auditor
}

// Auditor appends events to the org's audit log (audit.Repository).
type Auditor interface {
	AppendEvent(ctx context.Context, e audit.Event) error
}

// Service is the skills use case.
type Service struct {
	store    skill.Repository
	files    Files // nil: no skill store configured
	limits   skill.Limits
	locks    Locks    // nil: this process's mu alone
	archives Archives // nil: versions live on this server's disk only
	quota    Quota    // nil: uploads count toward no quota
	auditor  Auditor  // nil: nothing is audited
	now      func() time.Time

	mu sync.Mutex // one upload at a time picks the next version
}

// New returns the skills use case built from d. A missing Store is a
// wiring mistake: New panics naming it.
func New(d Deps) *Service {
	if d.Store == nil {
		panic("skills: New: Deps.Store is required")
	}
	if d.Limits.MaxEntries <= 0 {
		d.Limits = skill.DefaultLimits()
	}
	return &Service{store: d.Store, files: d.Files, limits: d.Limits, locks: d.Locks, archives: d.Archives, quota: d.Quota, auditor: d.Audit, now: time.Now}
}

// Upload stores a new version of a skill from a zip or tar (optionally
// gzip-compressed) archive holding a SKILL.md whose front matter gives the
// skill's name and description, at the archive's root or in its single
// top-level folder. Org admins only. Every entry is checked (no traversal,
// no links, no special files, size and count caps) before anything is
// written: a refused archive leaves nothing behind.
func (s *Service) Upload(ctx context.Context, p user.Principal, archive io.Reader) (skill.Skill, error) {
	if !p.IsAdmin() {
		return skill.Skill{}, fault.New(fault.Forbidden, "only org admins may upload skills")
	}
	if s.files == nil {
		return skill.Skill{}, fault.New(fault.Unavailable, "the skill store is not configured")
	}
	raw, err := io.ReadAll(io.LimitReader(archive, s.limits.MaxTotalBytes+1))
	if err != nil {
		return skill.Skill{}, fault.Wrap(fault.Invalid, "could not read the skill archive", err)
	}
	if int64(len(raw)) > s.limits.MaxTotalBytes {
		return skill.Skill{}, fault.Errorf(fault.TooLarge, "skill archive is larger than %d bytes", s.limits.MaxTotalBytes)
	}
	return s.upload(ctx, p, raw, uploadMode{})
}

// uploadMode says what an upload must be: a new skill (the Skills API's
// create), or a version of the skill named (its versions' create); the
// zero mode is either (the Workspace API's upload).
type uploadMode struct {
	create      bool   // the skill must not exist yet
	name        string // the skill the archive must name, when set
	displayName string // the label to give; "" keeps the latest's (or the name)
}

// upload checks and stores an archive as the next version of the skill
// its SKILL.md names.
func (s *Service) upload(ctx context.Context, p user.Principal, raw []byte, mode uploadMode) (skill.Skill, error) {
	entries, err := ReadArchive(raw, s.limits)
	if err != nil {
		return skill.Skill{}, err
	}
	var manifest []byte
	for _, e := range entries {
		if e.Path == manifestName {
			manifest = e.Data
		}
	}
	if manifest == nil {
		return skill.Skill{}, fault.New(fault.Invalid, "skill archive has no SKILL.md at its root or in its single top-level folder")
	}
	m, err := skill.ParseManifest(manifest)
	if err != nil {
		return skill.Skill{}, err
	}
	if mode.name != "" && m.Name != mode.name {
		return skill.Skill{}, fault.Errorf(fault.Invalid, "the SKILL.md names the skill %q, not %q: every version of a skill keeps its name", m.Name, mode.name)
	}
	var size int64
	for _, e := range entries {
		size += int64(len(e.Data))
	}
	if s.quota != nil {
		if err := s.quota.BeforeStore(ctx, p.OrgID, size); err != nil {
			return skill.Skill{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// From reading the latest version to recording the next one, no
	// other server picks a version of this skill: both would pick the
	// same and write over each other's files.
	if s.locks != nil {
		release, err := s.locks.Lock(ctx, "skill:"+p.OrgID+"/"+m.Name)
		if err != nil {
			return skill.Skill{}, fmt.Errorf("skills: lock: %w", err)
		}
		defer release()
	}
	version, display := 1, mode.displayName
	latest, err := s.store.LatestSkill(ctx, p.OrgID, m.Name)
	switch {
	case err == nil && mode.create:
		return skill.Skill{}, fault.Errorf(fault.Conflict, "the org has a skill named %q already (%s); add a version to it with POST /v1/skills/%s/versions", m.Name, SkillID(m.Name), SkillID(m.Name))
	case err == nil:
		version = latest.Version + 1
		if display == "" {
			display = latest.DisplayName
		}
	case fault.Is(err, fault.NotFound) && mode.name != "":
		return skill.Skill{}, fault.Errorf(fault.NotFound, "skill not found: %s", SkillID(mode.name))
	case !fault.Is(err, fault.NotFound):
		return skill.Skill{}, err
	}
	sum := sha256.Sum256(raw)
	sk := skill.Skill{
		ID: id.New("skl"), OrgID: p.OrgID, Name: m.Name, Description: m.Description, DisplayName: display, Version: version,
		SHA256: hex.EncodeToString(sum[:]), SizeBytes: size, CreatedAt: s.now().UTC(),
	}
	if s.archives != nil {
		if _, err := s.archives.Put(ctx, p.OrgID, bytes.NewReader(raw)); err != nil {
			return skill.Skill{}, fmt.Errorf("skills: save archive: %w", err)
		}
	}
	if err := s.files.Save(ctx, p.OrgID, sk.Name, sk.Version, entries); err != nil {
		s.dropArchive(ctx, p.OrgID, sk.SHA256)
		return skill.Skill{}, fmt.Errorf("skills: save: %w", err)
	}
	if err := s.store.CreateSkill(ctx, sk); err != nil {
		s.dropArchive(ctx, p.OrgID, sk.SHA256)
		return skill.Skill{}, err
	}
	s.audit(ctx, p, "skills.upload", sk.ID, map[string]any{"name": sk.Name, "version": sk.Version, "display_name": sk.DisplayName, "sha256": sk.SHA256})
	return sk, nil
}

// dropArchive removes the archive of an upload that was not recorded,
// unless a version of the org's skills records the same content: the
// store keeps one archive per content, which that version restores from.
// Another upload of the same content names the same skill, so it holds
// the same lock and cannot record it meanwhile. It is called with that
// lock held. A failure leaves the archive, which no quota counts, and
// the upload's own error is what the caller answers.
func (s *Service) dropArchive(ctx context.Context, orgID, sum string) {
	if s.archives == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	all, err := s.store.SkillsByOrg(ctx, orgID)
	if err != nil {
		return
	}
	for _, v := range all {
		if v.SHA256 == sum {
			return
		}
	}
	_ = s.archives.Remove(ctx, orgID, sum)
}

// List lists every version of the caller's org's skills.
func (s *Service) List(ctx context.Context, p user.Principal) ([]skill.Skill, error) {
	return s.store.SkillsByOrg(ctx, p.OrgID)
}

// Delete deletes the skill that a version id or a Skills API skill id of
// the caller's org names,
// every version of it, and its files. Org admins only.
func (s *Service) Delete(ctx context.Context, p user.Principal, skillID string) (skill.Skill, error) {
	ref := skillID
	if name, ok := nameOf(skillID); ok {
		// A Skills API id: the skill its name names.
		latest, err := s.store.LatestSkill(ctx, p.OrgID, name)
		if fault.Is(err, fault.NotFound) {
			return skill.Skill{}, fault.Errorf(fault.NotFound, "skill not found: %s", skillID)
		}
		if err != nil {
			return skill.Skill{}, err
		}
		ref = latest.ID
	}
	sk, err := s.store.Skill(ctx, p.OrgID, ref)
	if err != nil {
		return skill.Skill{}, err
	}
	if !p.IsAdmin() {
		return skill.Skill{}, fault.New(fault.Forbidden, "only org admins may delete skills")
	}
	// The archives of every version go too (one namespace per org, so no
	// other org's skill shares them; versions with the same content share
	// one archive, and all versions go).
	var sums []string
	if s.archives != nil {
		all, err := s.store.SkillsByOrg(ctx, p.OrgID)
		if err != nil {
			return skill.Skill{}, err
		}
		for _, v := range all {
			if v.Name == sk.Name && !slices.Contains(sums, v.SHA256) {
				sums = append(sums, v.SHA256)
			}
		}
	}
	if _, err := s.store.DeleteSkillVersions(ctx, p.OrgID, sk.Name); err != nil {
		return skill.Skill{}, err
	}
	for _, sum := range sums {
		if err := s.archives.Remove(ctx, p.OrgID, sum); err != nil {
			return skill.Skill{}, fmt.Errorf("skills: delete archive: %w", err)
		}
	}
	if s.files != nil {
		if err := s.files.Delete(ctx, p.OrgID, sk.Name); err != nil {
			return skill.Skill{}, fmt.Errorf("skills: delete files: %w", err)
		}
	}
	s.audit(ctx, p, "skills.delete", SkillID(sk.Name), map[string]any{"name": sk.Name})
	return sk, nil
}

// Resolve finds the skills a turn names (a Messages API request's
// container.skills: type, id or name, version; a chat turn's names, the
// latest version); one named twice is loaded once. Skills of
// another org are not found.
func (s *Service) Resolve(ctx context.Context, orgID string, refs []wire.SkillParam) ([]skill.Skill, error) {
	var out []skill.Skill
	seen := map[string]bool{}
	for i, r := range refs {
		ref := strings.TrimSpace(r.SkillID)
		if ref == "" {
			return nil, fault.Errorf(fault.Invalid, "skills.%d: a skill name or id is required", i)
		}
		if r.Type != "" && r.Type != "custom" && r.Type != "anthropic" {
			return nil, fault.Errorf(fault.Invalid, "skills.%d.type: %q is not \"custom\" or \"anthropic\"", i, r.Type)
		}
		var (
			sk  skill.Skill
			err error
		)
		if name, ok := nameOf(ref); ok {
			ref = name // a Skills API id names the skill
		}
		if strings.HasPrefix(ref, "skl_") {
			sk, err = s.store.Skill(ctx, orgID, ref)
			if err == nil && r.Version != "" && r.Version != "latest" {
				ref = sk.Name
			}
		}
		if !strings.HasPrefix(ref, "skl_") {
			switch v := r.Version; {
			case v == "" || v == "latest":
				sk, err = s.store.LatestSkill(ctx, orgID, ref)
			case strings.HasPrefix(v, "skl_"):
				// A version id pins that version of the skill.
				sk, err = s.store.Skill(ctx, orgID, v)
				if err == nil && sk.Name != ref {
					err = fault.New(fault.NotFound, "skill not found")
				}
			default:
				n, perr := strconv.Atoi(v)
				if perr != nil || n < 1 {
					return nil, fault.Errorf(fault.Invalid, "skills.%d.version: %q is not a version number or \"latest\"", i, v)
				}
				sk, err = s.store.SkillVersion(ctx, orgID, ref, n)
			}
		}
		if fault.Is(err, fault.NotFound) {
			if r.Type == "anthropic" {
				return nil, fault.Errorf(fault.NotFound, "skill not found: %s (Anthropic's pre-built skills are not on this server; an org admin can upload a skill of that name: POST /api/v1/app/skills)", r.SkillID)
			}
			return nil, fault.Errorf(fault.NotFound, "skill not found: %s", r.SkillID)
		}
		if err != nil {
			return nil, err
		}
		if !seen[sk.Name] {
			seen[sk.Name] = true
			out = append(out, sk)
		}
	}
	return out, nil
}

// Names returns the names of the skills a Messages API request names,
// found as Prepare finds them but loaded nowhere: what validate answers.
func (s *Service) Names(ctx context.Context, p user.Principal, refs []wire.SkillParam) ([]string, error) {
	found, err := s.Resolve(ctx, p.OrgID, refs)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(found))
	for i, sk := range found {
		names[i] = sk.Name
	}
	return names, nil
}

// Load makes the container with storage id containerID hold exactly the
// given skills, read-only at /mnt/skills/<name>/ (none unloads them all).
func (s *Service) Load(ctx context.Context, containerID string, skills []skill.Skill) error {
	if s.files == nil {
		if len(skills) == 0 {
			return nil
		}
		return fault.New(fault.Unavailable, "the skill store is not configured")
	}
	loads := make([]Load, len(skills))
	for i, sk := range skills {
		loads[i] = Load{OrgID: sk.OrgID, Name: sk.Name, Version: sk.Version}
		if err := s.restore(ctx, sk); err != nil {
			return err
		}
	}
	if err := s.files.Sync(ctx, containerID, loads); err != nil {
		return fmt.Errorf("skills: load: %w", err)
	}
	return nil
}

// Prompt tells the model which skills the turn loaded.
func Prompt(skills []skill.Skill, codeExec bool) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	if codeExec {
		b.WriteString("Skills are loaded read-only in the sandbox, one folder each at /mnt/skills/<name>/. " +
			"Before using a skill, read its /mnt/skills/<name>/SKILL.md with the code execution tools.\nAvailable skills:\n")
	} else {
		b.WriteString("The user asked for these skills, but this conversation cannot run code (the organization's policy " +
			"or the request leaves code execution out), so their files cannot be read:\n")
	}
	for _, sk := range skills {
		fmt.Fprintf(&b, "- %s: %s\n", sk.Name, sk.Description)
	}
	return strings.TrimRight(b.String(), "\n")
}

// restore writes the files of sk from its archive when this server's disk
// lacks them (and an archive store is set).
func (s *Service) restore(ctx context.Context, sk skill.Skill) error {
	if s.archives == nil {
		return nil
	}
	if ok, err := s.files.Has(ctx, sk.OrgID, sk.Name, sk.Version); err != nil || ok {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.files.Has(ctx, sk.OrgID, sk.Name, sk.Version); err != nil || ok {
		return err // restored meanwhile
	}
	rc, err := s.archives.Open(ctx, sk.OrgID, sk.SHA256)
	if err != nil {
		return fmt.Errorf("skills: restore %s v%d: %w", sk.Name, sk.Version, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, s.limits.MaxTotalBytes+1))
	if err != nil {
		return fmt.Errorf("skills: restore %s v%d: %w", sk.Name, sk.Version, err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != sk.SHA256 {
		return fmt.Errorf("skills: restore %s v%d: the stored archive does not match its hash", sk.Name, sk.Version)
	}
	entries, err := ReadArchive(raw, s.limits)
	if err != nil {
		return fmt.Errorf("skills: restore %s v%d: %w", sk.Name, sk.Version, err)
	}
	if err := s.files.Save(ctx, sk.OrgID, sk.Name, sk.Version, entries); err != nil {
		return fmt.Errorf("skills: restore %s v%d: %w", sk.Name, sk.Version, err)
	}
	return nil
}
