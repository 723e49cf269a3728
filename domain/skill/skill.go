// Package skill holds skills: folders with a SKILL.md that an org uploads,
// loaded read-only into sandboxes that ask for them. It also holds the rules
// an uploaded archive's entries must obey and the SKILL.md front matter.
package skill

import (
	"context"
	"regexp"
	"strings"
	"time"

	"threadbox/domain/fault"
)

// Skill is one uploaded version of a skill.
type Skill struct {
	ID          string
	OrgID       string
	Name        string
	Description string
	// DisplayName is the skill's human-readable label when the version
	// was made ("" for versions made without one: Name stands in).
	DisplayName string
	Version     int
	SHA256      string // of the uploaded archive
	// SizeBytes is the bytes of its files as unpacked, which count
	// toward the org's storage quota.
	SizeBytes int64
	CreatedAt time.Time
}

// Repository stores skills, scoped by org.
type Repository interface {
	CreateSkill(ctx context.Context, s Skill) error
	Skill(ctx context.Context, orgID, id string) (Skill, error)
	SkillsByOrg(ctx context.Context, orgID string) ([]Skill, error)
	DeleteSkill(ctx context.Context, orgID, id string) error
	// LatestSkill returns the newest version of the org's skill name.
	LatestSkill(ctx context.Context, orgID, name string) (Skill, error)
	// SkillVersion returns one version of the org's skill name.
	SkillVersion(ctx context.Context, orgID, name string, version int) (Skill, error)
	// DeleteSkillVersions deletes every version of the org's skill name and
	// returns how many.
	DeleteSkillVersions(ctx context.Context, orgID, name string) (int, error)
}

// Limits cap an uploaded archive.
type Limits struct {
	MaxEntries    int   // files and folders
	MaxFileBytes  int64 // one file, uncompressed
	MaxTotalBytes int64 // every file, uncompressed
}

// DefaultLimits are the caps used when none are configured.
func DefaultLimits() Limits {
	return Limits{MaxEntries: 1000, MaxFileBytes: 20 << 20, MaxTotalBytes: 50 << 20}
}

// EntryKind says what an archive entry is.
type EntryKind int

// The kinds of archive entries.
const (
	RegularFile EntryKind = iota + 1
	Folder
	Link  // a symbolic or hard link
	Other // devices, fifos and the like
)

// maxPathLen caps an entry's path.
const maxPathLen = 1024

// CleanEntry checks an archive entry's name and kind and returns its clean
// relative path ("" for the archive's root folder). Links, special files,
// absolute paths, backslashes, control characters and any ".." segment are
// refused: nothing may land outside the skill's folder.
func CleanEntry(name string, kind EntryKind) (string, error) {
	switch kind {
	case Link:
		return "", fault.Errorf(fault.Invalid, "skill archive entry %q is a link; links are not allowed", name)
	case RegularFile, Folder:
	default:
		return "", fault.Errorf(fault.Invalid, "skill archive entry %q is not a regular file or folder", name)
	}
	if len(name) > maxPathLen {
		return "", fault.Errorf(fault.Invalid, "skill archive entry name is longer than %d bytes", maxPathLen)
	}
	if strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\") || strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "", fault.Errorf(fault.Invalid, "skill archive entry %q has an absolute or invalid path", name)
	}
	var parts []string
	for _, seg := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		switch seg {
		case "..":
			return "", fault.Errorf(fault.Invalid, "skill archive entry %q leaves the skill's folder", name)
		case "", ".":
			continue
		}
		parts = append(parts, seg)
	}
	return strings.Join(parts, "/"), nil
}

// Tally counts an archive's entries against the limits as they are read.
type Tally struct {
	limits  Limits
	entries int
	total   int64
}

// NewTally starts counting against l.
func NewTally(l Limits) *Tally { return &Tally{limits: l} }

// Add counts one entry of size bytes (0 for folders).
func (t *Tally) Add(name string, size int64) error {
	t.entries++
	if t.entries > t.limits.MaxEntries {
		return fault.Errorf(fault.Invalid, "skill archive has more than %d entries", t.limits.MaxEntries)
	}
	if size > t.limits.MaxFileBytes {
		return fault.Errorf(fault.TooLarge, "skill archive entry %q is larger than %d bytes", name, t.limits.MaxFileBytes)
	}
	t.total += size
	if t.total > t.limits.MaxTotalBytes {
		return fault.Errorf(fault.TooLarge, "skill archive holds more than %d bytes", t.limits.MaxTotalBytes)
	}
	return nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// ValidateName checks a skill name: 1 to 64 lower-case letters, digits and
// hyphens, starting with a letter or digit (it names a folder in /mnt/skills).
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fault.Errorf(fault.Invalid, "skill name %q must be 1 to 64 lower-case letters, digits and hyphens", name)
	}
	return nil
}

// maxDescription caps a skill's description.
const maxDescription = 1024

// Manifest is what a SKILL.md's front matter says.
type Manifest struct {
	Name        string
	Description string
}

// ParseManifest reads the YAML front matter of a SKILL.md: a block between
// two "---" lines holding at least `name:` and `description:` (single-line
// values, optionally quoted).
func ParseManifest(doc []byte) (Manifest, error) {
	text := strings.ReplaceAll(strings.TrimPrefix(string(doc), "\ufeff"), "\r\n", "\n")
	lines := strings.Split(text, "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "---" {
		return Manifest{}, fault.New(fault.Invalid, "SKILL.md must start with a front matter block (---) giving name and description")
	}
	var m Manifest
	closed := false
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "---" {
			closed = true
			break
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			continue
		}
		v = unquote(strings.TrimSpace(v))
		switch strings.TrimSpace(k) {
		case "name":
			m.Name = v
		case "description":
			m.Description = v
		}
	}
	if !closed {
		return Manifest{}, fault.New(fault.Invalid, "SKILL.md front matter is not closed with ---")
	}
	if err := ValidateName(m.Name); err != nil {
		return Manifest{}, err
	}
	if strings.TrimSpace(m.Description) == "" || len(m.Description) > maxDescription {
		return Manifest{}, fault.Errorf(fault.Invalid, "SKILL.md description must be 1 to %d characters", maxDescription)
	}
	if !fault.Storable(m.Description) {
		return Manifest{}, fault.New(fault.Invalid, "SKILL.md description must be UTF-8 text without NUL characters")
	}
	return m, nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

// File is one file of a skill's folder.
type File struct {
	Path string // clean, relative, '/'-separated
	Data []byte
}
