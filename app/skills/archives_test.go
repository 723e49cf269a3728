package skills

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"testing"

	"threadbox/domain/fault"
	"threadbox/domain/skill"
	"threadbox/domain/user"
)

// memRepo is the skill records of a test; while refuse is set, it is
// what creating a record answers (a database that refuses the record).
type memRepo struct {
	mu     sync.Mutex
	rows   []skill.Skill
	refuse error
}

func (r *memRepo) CreateSkill(_ context.Context, s skill.Skill) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != nil {
		return r.refuse
	}
	r.rows = append(r.rows, s)
	return nil
}
func (r *memRepo) Skill(_ context.Context, orgID, id string) (skill.Skill, error) {
	for _, s := range r.rows {
		if s.OrgID == orgID && s.ID == id {
			return s, nil
		}
	}
	return skill.Skill{}, fault.New(fault.NotFound, "skill not found")
}
func (r *memRepo) SkillsByOrg(_ context.Context, orgID string) ([]skill.Skill, error) {
	var out []skill.Skill
	for _, s := range r.rows {
		if s.OrgID == orgID {
			out = append(out, s)
		}
	}
	return out, nil
}
func (r *memRepo) DeleteSkill(context.Context, string, string) error { return nil }
func (r *memRepo) LatestSkill(_ context.Context, orgID, name string) (skill.Skill, error) {
	var best skill.Skill
	for _, s := range r.rows {
		if s.OrgID == orgID && s.Name == name && s.Version > best.Version {
			best = s
		}
	}
	if best.Version == 0 {
		return skill.Skill{}, fault.New(fault.NotFound, "skill not found")
	}
	return best, nil
}
func (r *memRepo) SkillVersion(_ context.Context, orgID, name string, v int) (skill.Skill, error) {
	for _, s := range r.rows {
		if s.OrgID == orgID && s.Name == name && s.Version == v {
			return s, nil
		}
	}
	return skill.Skill{}, fault.New(fault.NotFound, "skill not found")
}
func (r *memRepo) DeleteSkillVersions(_ context.Context, orgID, name string) (int, error) {
	var keep []skill.Skill
	for _, s := range r.rows {
		if !(s.OrgID == orgID && s.Name == name) {
			keep = append(keep, s)
		}
	}
	n := len(r.rows) - len(keep)
	r.rows = keep
	return n, nil
}

// memFiles is one server's disk of skill files.
type memFiles struct{ saved map[string][]skill.File }

func key(orgID, name string, v int) string { return fmt.Sprintf("%s/%s/%d", orgID, name, v) }

func (f *memFiles) Save(_ context.Context, orgID, name string, v int, files []skill.File) error {
	f.saved[key(orgID, name, v)] = files
	return nil
}
func (f *memFiles) Delete(_ context.Context, orgID, name string) error {
	for k := range f.saved {
		if len(k) > len(orgID+"/"+name+"/") && k[:len(orgID+"/"+name+"/")] == orgID+"/"+name+"/" {
			delete(f.saved, k)
		}
	}
	return nil
}
func (f *memFiles) Sync(context.Context, string, []Load) error { return nil }
func (f *memFiles) Has(_ context.Context, orgID, name string, v int) (bool, error) {
	_, ok := f.saved[key(orgID, name, v)]
	return ok, nil
}

// memArchives is the shared object store.
type memArchives struct{ m map[string][]byte }

func (a *memArchives) Put(_ context.Context, orgID string, r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	a.m[orgID+"/"+h] = b
	return h, nil
}
func (a *memArchives) Open(_ context.Context, orgID, sum string) (io.ReadCloser, error) {
	b, ok := a.m[orgID+"/"+sum]
	if !ok {
		return nil, fault.New(fault.NotFound, "content not found")
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}
func (a *memArchives) Remove(_ context.Context, orgID, sum string) error {
	delete(a.m, orgID+"/"+sum)
	return nil
}

// TestArchivesRestoreAndDelete: two servers share the records and the
// archives but not their disks: a version uploaded on one is restored from
// its archive when the other loads it; deleting the skill deletes its
// archives, not another org's copy of the same archive.
func TestArchivesRestoreAndDelete(t *testing.T) {
	ctx := context.Background()
	repo, arch := &memRepo{}, &memArchives{m: map[string][]byte{}}
	disk1, disk2 := &memFiles{saved: map[string][]skill.File{}}, &memFiles{saved: map[string][]skill.File{}}
	one, two := New(Deps{Store: repo, Files: disk1, Archives: arch}), New(Deps{Store: repo, Files: disk2, Archives: arch})
	admin := user.Principal{UserID: "u1", OrgID: "org_a", Role: user.Admin}
	other := user.Principal{UserID: "u2", OrgID: "org_b", Role: user.Admin}
	raw := zipOf(t, entry{name: "SKILL.md", body: "---\nname: report\ndescription: Reports\n---\n# report\n"}, entry{name: "run.py", body: "print(1)"})

	sk, err := one.Upload(ctx, admin, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.Upload(ctx, other, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if len(arch.m) != 2 {
		t.Fatalf("archives stored: %d, want one per org", len(arch.m))
	}
	if ok, _ := disk2.Has(ctx, "org_a", "report", 1); ok {
		t.Fatal("the second server's disk has the files already")
	}
	if err := two.Load(ctx, "thr_x", []skill.Skill{sk}); err != nil {
		t.Fatal(err)
	}
	files := disk2.saved[key("org_a", "report", 1)]
	if len(files) != 2 || string(files[1].Data) != "print(1)" && string(files[0].Data) != "print(1)" {
		t.Fatalf("restored files: %+v", files)
	}
	// A tampered archive is refused, not loaded.
	delete(disk2.saved, key("org_a", "report", 1))
	arch.m["org_a/"+sk.SHA256] = append([]byte(nil), raw[:len(raw)-1]...)
	if err := two.Load(ctx, "thr_x", []skill.Skill{sk}); err == nil {
		t.Fatal("a tampered archive was loaded")
	}
	arch.m["org_a/"+sk.SHA256] = raw

	if _, err := one.Delete(ctx, admin, sk.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := arch.m["org_a/"+sk.SHA256]; ok {
		t.Fatal("the deleted skill's archive was kept")
	}
	if _, ok := arch.m["org_b/"+sk.SHA256]; !ok {
		t.Fatal("another org's copy of the archive was deleted")
	}
}

// TestSkillUploadRefusedByTheDatabaseLeavesNoArchive: an upload whose
// record the database refuses leaves no archive in the store, and the
// next upload of the skill stores its own; a refused upload of content a
// recorded version holds leaves that version's archive, which it
// restores from.
func TestSkillUploadRefusedByTheDatabaseLeavesNoArchive(t *testing.T) {
	ctx := context.Background()
	repo, arch := &memRepo{}, &memArchives{m: map[string][]byte{}}
	svc := New(Deps{Store: repo, Files: &memFiles{saved: map[string][]skill.File{}}, Archives: arch})
	admin := user.Principal{UserID: "u1", OrgID: "org_a", Role: user.Admin}
	first := zipOf(t, entry{name: "SKILL.md", body: "---\nname: report\ndescription: Reports\n---\n"})
	second := zipOf(t, entry{name: "SKILL.md", body: "---\nname: report\ndescription: Reports better\n---\n"})

	repo.refuse = fault.New(fault.Invalid, "the database refused the record")
	if _, err := svc.Upload(ctx, admin, bytes.NewReader(first)); !fault.Is(err, fault.Invalid) {
		t.Fatalf("a refused record: %v, want the database's refusal", err)
	}
	if len(arch.m) != 0 {
		t.Fatalf("a refused upload left %d archives", len(arch.m))
	}
	repo.refuse = nil
	sk, err := svc.Upload(ctx, admin, bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := arch.m["org_a/"+sk.SHA256]; !ok || len(arch.m) != 1 {
		t.Fatalf("the upload after a refused one: archives %d, its own kept %v", len(arch.m), ok)
	}

	repo.refuse = fault.New(fault.Invalid, "the database refused the record")
	for _, raw := range [][]byte{first, second} {
		if _, err := svc.Upload(ctx, admin, bytes.NewReader(raw)); err == nil {
			t.Fatal("a refused record was answered as stored")
		}
	}
	if _, ok := arch.m["org_a/"+sk.SHA256]; !ok || len(arch.m) != 1 {
		t.Fatalf("after refused uploads: archives %d, the recorded version's kept %v", len(arch.m), ok)
	}
}
