package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"threadbox/domain/artifact"
	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/project"
	"threadbox/domain/skill"
	"threadbox/domain/thread"
	"threadbox/domain/user"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestArtifactAndSkillRepositories runs the artifact and skill repositories
// against SQLite and PostgreSQL.
func TestArtifactAndSkillRepositories(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		artifactSkillSuite(t, s)
	})
	t.Run("postgres", func(t *testing.T) { artifactSkillSuite(t, storetest.Postgres(t)) })
}

func artifactSkillSuite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	o, _ := org.New(id("org"), "acme-"+id("n"), now)
	other, _ := org.New(id("org"), "globex-"+id("n"), now)
	for _, x := range []org.Org{o, other} {
		if err := s.Accounts().CreateOrg(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := user.New(id("usr"), o.ID(), id("u")+"@acme.test", user.Member, now)
	if err := s.Accounts().CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	pr, _ := project.New(id("prj"), o.ID(), u.ID(), "Research", now)
	if err := s.Threads().CreateProject(ctx, pr); err != nil {
		t.Fatal(err)
	}
	th, _ := thread.New(id("thr"), o.ID(), pr.ID(), u.ID(), "t", now)
	if err := s.Threads().CreateThread(ctx, th); err != nil {
		t.Fatal(err)
	}

	// Artifacts: versions per path, org-scoped lookups, outliving the thread.
	if _, err := s.Artifacts().LatestArtifact(ctx, pr.ID(), th.ID(), "/mnt/user-data/outputs/a.png"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("latest of nothing: %v", err)
	}
	mk := func(v int, sum string, at time.Time) artifact.Artifact {
		return artifact.Artifact{ID: id("art"), OrgID: o.ID(), ProjectID: pr.ID(), ThreadID: th.ID(), ToolUseID: "srvtoolu_1",
			Path: "/mnt/user-data/outputs/a.png", Name: "a.png", MimeType: "image/png", SizeBytes: 10, SHA256: sum, Version: v, CreatedAt: at}
	}
	a1, a2 := mk(1, "aa", now), mk(2, "bb", now.Add(time.Second))
	for _, a := range []artifact.Artifact{a1, a2} {
		if err := s.Artifacts().CreateArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Artifacts().CreateArtifact(ctx, mk(2, "cc", now)); !fault.Is(err, fault.Conflict) {
		t.Fatalf("duplicate version: %v", err)
	}
	latest, err := s.Artifacts().LatestArtifact(ctx, pr.ID(), th.ID(), a1.Path)
	if err != nil || latest.ID != a2.ID || latest.Version != 2 || latest.SHA256 != "bb" || !latest.CreatedAt.Equal(a2.CreatedAt) {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	if same, err := s.Artifacts().ArtifactWithContent(ctx, pr.ID(), a1.Path, "aa"); err != nil || same.ID != a1.ID {
		t.Fatalf("artifact with content: %+v %v", same, err)
	}
	if _, err := s.Artifacts().ArtifactWithContent(ctx, pr.ID(), a1.Path, "zz"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("artifact with other content: %v", err)
	}
	if got, err := s.Artifacts().Artifact(ctx, o.ID(), a1.ID); err != nil || got != a1 {
		t.Fatalf("round trip: %+v %v want %+v", got, err, a1)
	}
	if _, err := s.Artifacts().Artifact(ctx, other.ID(), a1.ID); !fault.Is(err, fault.NotFound) {
		t.Fatalf("another org's artifact: %v", err)
	}
	if list, _ := s.Artifacts().ArtifactsByProject(ctx, other.ID(), pr.ID(), artifact.Page{}); len(list) != 0 {
		t.Fatalf("another org lists the project's artifacts: %v", list)
	}
	if err := s.Threads().DeleteThread(ctx, o.ID(), u.ID(), th.ID()); err != nil {
		t.Fatal(err)
	}
	list, err := s.Artifacts().ArtifactsByProject(ctx, o.ID(), pr.ID(), artifact.Page{})
	if err != nil || len(list) != 2 || list[0].ID != a1.ID || list[1].ID != a2.ID {
		t.Fatalf("artifacts after the thread was deleted: %v %v", list, err)
	}

	// Skills: versions by name, org-scoped, deleted together.
	sk := func(org string, v int) skill.Skill {
		return skill.Skill{ID: id("skl"), OrgID: org, Name: "pdf", Description: "PDFs", Version: v, SHA256: "ff", CreatedAt: now}
	}
	s1, s2, s3 := sk(o.ID(), 1), sk(o.ID(), 2), sk(other.ID(), 1)
	for _, x := range []skill.Skill{s1, s2, s3} {
		if err := s.Skills().CreateSkill(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Skills().CreateSkill(ctx, sk(o.ID(), 2)); !fault.Is(err, fault.Conflict) {
		t.Fatalf("duplicate skill version: %v", err)
	}
	if got, err := s.Skills().LatestSkill(ctx, o.ID(), "pdf"); err != nil || got.ID != s2.ID {
		t.Fatalf("latest skill: %+v %v", got, err)
	}
	if got, err := s.Skills().SkillVersion(ctx, o.ID(), "pdf", 1); err != nil || got.ID != s1.ID {
		t.Fatalf("skill version: %+v %v", got, err)
	}
	if _, err := s.Skills().Skill(ctx, other.ID(), s1.ID); !fault.Is(err, fault.NotFound) {
		t.Fatalf("another org's skill: %v", err)
	}
	if n, err := s.Skills().DeleteSkillVersions(ctx, o.ID(), "pdf"); err != nil || n != 2 {
		t.Fatalf("delete versions: %d %v", n, err)
	}
	if list, _ := s.Skills().SkillsByOrg(ctx, o.ID()); len(list) != 0 {
		t.Fatalf("skills left: %v", list)
	}
	if list, _ := s.Skills().SkillsByOrg(ctx, other.ID()); len(list) != 1 {
		t.Fatalf("another org's skill deleted: %v", list)
	}
	if err := s.Skills().DeleteSkill(ctx, other.ID(), s3.ID); err != nil {
		t.Fatal(err)
	}
}

// TestArtifactHashReferences runs the queries behind artifact blob
// collection against SQLite and PostgreSQL: a project's distinct hashes,
// and which of a set of hashes any artifact still references.
func TestArtifactHashReferences(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		hashReferenceSuite(t, s)
	})
	t.Run("postgres", func(t *testing.T) { hashReferenceSuite(t, storetest.Postgres(t)) })
}

func hashReferenceSuite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	type place struct{ org, project, thread string }
	var acme, globex place
	for _, pl := range []*place{&acme, &globex} {
		o, _ := org.New(id("org"), "org-"+id("n"), now)
		u, _ := user.New(id("usr"), o.ID(), id("u")+"@x.test", user.Admin, now)
		if err := s.Accounts().CreateOrg(ctx, o); err != nil {
			t.Fatal(err)
		}
		if err := s.Accounts().CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		pr, _ := project.New(id("prj"), o.ID(), u.ID(), "P", now)
		if err := s.Threads().CreateProject(ctx, pr); err != nil {
			t.Fatal(err)
		}
		*pl = place{o.ID(), pr.ID(), id("thr")}
	}
	// A second project of acme, owned by acme's first project's owner.
	first, err := s.Threads().Project(ctx, acme.org, acme.project)
	if err != nil {
		t.Fatal(err)
	}
	pr2, _ := project.New(id("prj"), acme.org, first.OwnerID(), "Q", now)
	if err := s.Threads().CreateProject(ctx, pr2); err != nil {
		t.Fatal(err)
	}
	acme2 := place{acme.org, pr2.ID(), id("thr")}
	sum := func(c string) string { return strings.Repeat(c, 64) }
	v := 0
	add := func(pl place, path, sha string) {
		t.Helper()
		v++
		a := artifact.Artifact{ID: id("art"), OrgID: pl.org, ProjectID: pl.project, ThreadID: pl.thread, Path: path, Name: "x",
			MimeType: "text/plain", SizeBytes: 1, SHA256: sha, Version: v, CreatedAt: now}
		if err := s.Artifacts().CreateArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	add(acme, "/mnt/user-data/outputs/a", sum("a"))
	add(acme, "/mnt/user-data/outputs/a", sum("b"))
	add(acme, "/mnt/user-data/outputs/c", sum("a")) // the same content twice in one project
	add(acme2, "/mnt/user-data/outputs/a", sum("a"))
	add(acme2, "/mnt/user-data/outputs/a", sum("c"))
	add(globex, "/mnt/user-data/outputs/a", sum("d"))

	for _, tt := range []struct {
		name        string
		org, projID string
		want        []string
	}{
		{"distinct and sorted", acme.org, acme.project, []string{sum("a"), sum("b")}},
		{"another project", acme.org, acme2.project, []string{sum("a"), sum("c")}},
		{"another org's project", globex.org, acme.project, nil},
		{"no such project", acme.org, "prj_missing", nil},
	} {
		got, err := s.Artifacts().ProjectArtifactHashes(ctx, tt.org, tt.projID)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ProjectArtifactHashes %s = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}

	// More hashes than one IN list holds: the referenced one at the end.
	many := make([]string, 0, 1300)
	for i := range 1299 {
		many = append(many, fmt.Sprintf("%064x", i+1))
	}
	many = append(many, sum("d"))
	referenced := func(sums []string) []string {
		t.Helper()
		got, err := s.Artifacts().ReferencedArtifactHashes(ctx, sums)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	for _, tt := range []struct {
		name string
		sums []string
		want []string
	}{
		{"none asked", nil, nil},
		{"any org's, each once", []string{sum("a"), sum("b"), sum("c"), sum("d"), sum("e"), sum("a")}, []string{sum("a"), sum("b"), sum("c"), sum("d")}},
		{"unreferenced", []string{sum("e"), sum("f")}, nil},
		{"past one batch", many, []string{sum("d")}},
	} {
		if got := referenced(tt.sums); !slices.Equal(got, tt.want) {
			t.Errorf("ReferencedArtifactHashes %s = %v, want %v", tt.name, got, tt.want)
		}
	}

	// Deleting a project drops its references; shared content stays
	// referenced by the other project.
	if err := s.Threads().DeleteProject(ctx, acme.org, acme.project); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Artifacts().ProjectArtifactHashes(ctx, acme.org, acme.project); err != nil || len(got) != 0 {
		t.Fatalf("hashes of a deleted project: %v %v", got, err)
	}
	if got, want := referenced([]string{sum("a"), sum("b")}), []string{sum("a")}; !slices.Equal(got, want) {
		t.Fatalf("referenced after the project was deleted = %v, want %v", got, want)
	}
}
