package skillfs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"threadbox/domain/skill"
)

// TestSyncWithoutSkills: a request that loads no skills leaves a missing
// or empty folder as it is (one stat) and empties one that holds skills
// an earlier request loaded.
func TestSyncWithoutSkills(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := New(filepath.Join(root, "store"), func(id string) string { return filepath.Join(root, "containers", id, "skills") })
	if err := s.Save(ctx, "org", "pdf", 1, []skill.File{{Path: "SKILL.md", Data: []byte("# pdf")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "missing", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "containers", "missing")); !os.IsNotExist(err) {
		t.Fatalf("a sync without skills made the folder: %v", err)
	}
	if err := s.Sync(ctx, "c", []Load{{OrgID: "org", Name: "pdf", Version: 1}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "containers", "c", "skills", "pdf", "SKILL.md")); err != nil || string(b) != "# pdf" {
		t.Fatalf("loaded skill: %q %v", b, err)
	}
	for range 2 { // the second finds it empty
		if err := s.Sync(ctx, "c", nil); err != nil {
			t.Fatal(err)
		}
		if entries, err := os.ReadDir(filepath.Join(root, "containers", "c", "skills")); err != nil || len(entries) != 0 {
			t.Fatalf("skills folder after a sync without skills: %v %v", entries, err)
		}
	}
}

// TestSaveReplacesALeftVersion: saving a version whose folder an earlier
// save left (its upload failed before the record was written) stores the
// new files in its place, and nothing of the old ones remains. Before, the
// rename failed with "file exists" and every later upload of that version
// was answered 500.
func TestSaveReplacesALeftVersion(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := New(root, func(id string) string { return filepath.Join(root, "containers", id) })
	left := []skill.File{{Path: "SKILL.md", Data: []byte("# left")}, {Path: "scripts/old.py", Data: []byte("old")}}
	if err := s.Save(ctx, "org", "pdf", 1, left); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "org", "pdf", 1, []skill.File{{Path: "SKILL.md", Data: []byte("# new")}}); err != nil {
		t.Fatalf("save over a left version: %v", err)
	}
	dir := filepath.Join(root, "org", "pdf")
	if b, err := os.ReadFile(filepath.Join(dir, "1", "SKILL.md")); err != nil || string(b) != "# new" {
		t.Fatalf("SKILL.md after the second save: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "1", "scripts")); !os.IsNotExist(err) {
		t.Fatalf("the left version's files remain: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Fatalf("the skill's folder holds %v (%v), want only its version", entries, err)
	}
}
