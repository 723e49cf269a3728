package workspace

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"threadbox/app/messages"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/skill"
	"threadbox/domain/user"
)

// skillManifest is the file every skill holds.
const skillManifest = "SKILL.md"

func (s *Service) skillLimits() skill.Limits {
	if s.d.SkillLimits.MaxEntries > 0 {
		return s.d.SkillLimits
	}
	return skill.DefaultLimits()
}

// UploadSkill stores a new version of a skill from a zip or tar (optionally
// gzip-compressed) archive holding a SKILL.md whose front matter gives the
// skill's name and description, at the archive's root or in its single
// top-level folder. Org admins only. Every entry is checked (no traversal,
// no links, no special files, size and count caps) before anything is
// written: a refused archive leaves nothing behind.
func (s *Service) UploadSkill(ctx context.Context, p user.Principal, archive io.Reader) (skill.Skill, error) {
	if !p.IsAdmin() {
		return skill.Skill{}, fault.New(fault.Forbidden, "only org admins may upload skills")
	}
	if s.d.Skills == nil {
		return skill.Skill{}, fault.New(fault.Unavailable, "the skill store is not configured")
	}
	lim := s.skillLimits()
	raw, err := io.ReadAll(io.LimitReader(archive, lim.MaxTotalBytes+1))
	if err != nil {
		return skill.Skill{}, fault.Wrap(fault.Invalid, "could not read the skill archive", err)
	}
	if int64(len(raw)) > lim.MaxTotalBytes {
		return skill.Skill{}, fault.Errorf(fault.TooLarge, "skill archive is larger than %d bytes", lim.MaxTotalBytes)
	}
	entries, err := ReadSkillArchive(raw, lim)
	if err != nil {
		return skill.Skill{}, err
	}
	var manifest []byte
	for _, e := range entries {
		if e.Path == skillManifest {
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
	// One upload at a time picks the next version and writes it: two at
	// once would take the same number.
	s.skillMu.Lock()
	defer s.skillMu.Unlock()
	version := 1
	latest, err := s.store.LatestSkill(ctx, p.OrgID, m.Name)
	switch {
	case err == nil:
		version = latest.Version + 1
	case !fault.Is(err, fault.NotFound):
		return skill.Skill{}, err
	}
	sum := sha256.Sum256(raw)
	sk := skill.Skill{
		ID: id.New("skl"), OrgID: p.OrgID, Name: m.Name, Description: m.Description, Version: version,
		SHA256: hex.EncodeToString(sum[:]), CreatedAt: s.now().UTC(),
	}
	if err := s.d.Skills.Save(ctx, p.OrgID, sk.Name, sk.Version, entries); err != nil {
		return skill.Skill{}, fmt.Errorf("workspace: save skill: %w", err)
	}
	if err := s.store.CreateSkill(ctx, sk); err != nil {
		return skill.Skill{}, err
	}
	return sk, nil
}

// ReadSkillArchive reads and checks every entry of a zip or tar (optionally
// gzip-compressed) archive and returns its files, with the archive's
// single top-level folder stripped when SKILL.md is inside it.
func ReadSkillArchive(raw []byte, lim skill.Limits) ([]skill.File, error) {
	var (
		files []skill.File
		err   error
	)
	switch {
	case bytes.HasPrefix(raw, []byte("PK\x03\x04")) || bytes.HasPrefix(raw, []byte("PK\x05\x06")):
		files, err = readZip(raw, lim)
	case bytes.HasPrefix(raw, []byte{0x1f, 0x8b}):
		zr, gerr := gzip.NewReader(bytes.NewReader(raw))
		if gerr != nil {
			return nil, fault.Wrap(fault.Invalid, "skill archive: bad gzip stream", gerr)
		}
		files, err = readTar(zr, lim)
	default:
		files, err = readTar(bytes.NewReader(raw), lim)
	}
	if err != nil {
		return nil, err
	}
	files = stripTop(files)
	// Each path once, and none both a file and a folder ("a" and "a/b"):
	// such an archive cannot be written out.
	paths := make(map[string]bool, len(files))
	for _, f := range files {
		if paths[f.Path] {
			return nil, fault.Errorf(fault.Invalid, "skill archive: %q appears twice", f.Path)
		}
		paths[f.Path] = true
	}
	for _, f := range files {
		for dir := path.Dir(f.Path); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if paths[dir] {
				return nil, fault.Errorf(fault.Invalid, "skill archive: %q is a file and also a folder of %q", dir, f.Path)
			}
		}
	}
	return files, nil
}

// stripTop removes a single top-level folder holding SKILL.md.
func stripTop(files []skill.File) []skill.File {
	top := ""
	for _, f := range files {
		if f.Path == skillManifest {
			return files
		}
		first, _, nested := strings.Cut(f.Path, "/")
		if !nested || (top != "" && first != top) {
			return files
		}
		top = first
	}
	if top == "" {
		return files
	}
	out := make([]skill.File, 0, len(files))
	for _, f := range files {
		out = append(out, skill.File{Path: strings.TrimPrefix(f.Path, top+"/"), Data: f.Data})
	}
	return out
}

func readZip(raw []byte, lim skill.Limits) ([]skill.File, error) {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return nil, fault.Wrap(fault.Invalid, "skill archive: not a valid zip file", err)
	}
	tally := skill.NewTally(lim)
	var out []skill.File
	for _, f := range zr.File {
		mode := f.Mode()
		kind := skill.Other
		switch {
		case mode&fs.ModeSymlink != 0:
			kind = skill.Link
		case mode.IsDir():
			kind = skill.Folder
		case mode.IsRegular():
			kind = skill.RegularFile
		}
		rel, err := skill.CleanEntry(f.Name, kind)
		if err != nil {
			return nil, err
		}
		size := int64(0)
		if kind == skill.RegularFile {
			size = int64(min(f.UncompressedSize64, 1<<62))
		}
		if err := tally.Add(f.Name, size); err != nil {
			return nil, err
		}
		if kind == skill.Folder || rel == "" {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fault.Wrap(fault.Invalid, "skill archive: unreadable entry "+f.Name, err)
		}
		data, err := readCapped(rc, f.Name, lim.MaxFileBytes)
		rc.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, skill.File{Path: rel, Data: data})
	}
	return out, nil
}

func readTar(r io.Reader, lim skill.Limits) ([]skill.File, error) {
	tr := tar.NewReader(r)
	tally := skill.NewTally(lim)
	var out []skill.File
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fault.Wrap(fault.Invalid, "skill archive: not a valid zip or tar file", err)
		}
		kind := skill.Other
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeReg, tar.TypeRegA:
			kind = skill.RegularFile
		case tar.TypeDir:
			kind = skill.Folder
		case tar.TypeSymlink, tar.TypeLink:
			kind = skill.Link
		}
		rel, err := skill.CleanEntry(h.Name, kind)
		if err != nil {
			return nil, err
		}
		size := int64(0)
		if kind == skill.RegularFile {
			size = h.Size
		}
		if err := tally.Add(h.Name, size); err != nil {
			return nil, err
		}
		if kind == skill.Folder || rel == "" {
			continue
		}
		data, err := readCapped(tr, h.Name, lim.MaxFileBytes)
		if err != nil {
			return nil, err
		}
		out = append(out, skill.File{Path: rel, Data: data})
	}
	if len(out) == 0 {
		return nil, fault.New(fault.Invalid, "skill archive is empty or not a zip or tar file")
	}
	return out, nil
}

// readCapped reads an entry whose declared size may lie.
func readCapped(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fault.Wrap(fault.Invalid, "skill archive: unreadable entry "+name, err)
	}
	if int64(len(data)) > limit {
		return nil, fault.Errorf(fault.TooLarge, "skill archive entry %q is larger than %d bytes", name, limit)
	}
	return data, nil
}

// Skills lists every version of the caller's org's skills.
func (s *Service) Skills(ctx context.Context, p user.Principal) ([]skill.Skill, error) {
	return s.store.SkillsByOrg(ctx, p.OrgID)
}

// DeleteSkill deletes the skill that a version id of the caller's org
// names, every version of it, and its files. Org admins only.
func (s *Service) DeleteSkill(ctx context.Context, p user.Principal, skillID string) (skill.Skill, error) {
	sk, err := s.store.Skill(ctx, p.OrgID, skillID)
	if err != nil {
		return skill.Skill{}, err
	}
	if !p.IsAdmin() {
		return skill.Skill{}, fault.New(fault.Forbidden, "only org admins may delete skills")
	}
	if _, err := s.store.DeleteSkillVersions(ctx, p.OrgID, sk.Name); err != nil {
		return skill.Skill{}, err
	}
	if s.d.Skills != nil {
		if err := s.d.Skills.Delete(ctx, p.OrgID, sk.Name); err != nil {
			return skill.Skill{}, fmt.Errorf("workspace: delete skill files: %w", err)
		}
	}
	return sk, nil
}

// resolveSkills finds the latest version of each named skill (a name or a
// version id) of the org; one named twice is loaded once.
func (s *Service) resolveSkills(ctx context.Context, orgID string, refs []string) ([]skill.Skill, error) {
	params := make([]messages.SkillParam, len(refs))
	for i, r := range refs {
		params[i] = messages.SkillParam{Type: "custom", SkillID: r}
	}
	return s.resolveSkillParams(ctx, orgID, params)
}

func (s *Service) resolveSkillParams(ctx context.Context, orgID string, refs []messages.SkillParam) ([]skill.Skill, error) {
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

// ResolveSkills returns the names of the skills a Messages API request
// names (container.skills), found as PrepareSkills finds them (type,
// version and all) but loaded nowhere: what validate answers.
func (s *Service) ResolveSkills(ctx context.Context, p user.Principal, refs []messages.SkillParam) ([]string, error) {
	skills, err := s.resolveSkillParams(ctx, p.OrgID, refs)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(skills))
	for i, sk := range skills {
		names[i] = sk.Name
	}
	return names, nil
}

// PrepareSkills loads the skills a Messages API request names
// (container.skills) into the container with storage id containerID,
// read-only at /mnt/skills/<name>/, and returns the text that tells the
// model their names and descriptions ("" when refs is empty). Skills of
// another org are not found.
func (s *Service) PrepareSkills(ctx context.Context, p user.Principal, containerID string, refs []messages.SkillParam) (string, error) {
	if len(refs) == 0 {
		// A request without skills sees none: those of an earlier request
		// leave /mnt/skills.
		if s.d.Skills != nil {
			if err := s.d.Skills.Sync(ctx, containerID, nil); err != nil {
				return "", fmt.Errorf("workspace: unload skills: %w", err)
			}
		}
		return "", nil
	}
	skills, err := s.resolveSkillParams(ctx, p.OrgID, refs)
	if err != nil {
		return "", err
	}
	if s.d.Skills == nil {
		return "", fault.New(fault.Unavailable, "the skill store is not configured")
	}
	loads := make([]SkillLoad, len(skills))
	for i, sk := range skills {
		loads[i] = SkillLoad{OrgID: sk.OrgID, Name: sk.Name, Version: sk.Version}
	}
	if err := s.d.Skills.Sync(ctx, containerID, loads); err != nil {
		return "", fmt.Errorf("workspace: load skills: %w", err)
	}
	return skillsPrompt(skills, true), nil
}
