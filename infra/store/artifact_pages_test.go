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
	"threadbox/domain/thread"
	"threadbox/domain/user"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestArtifactPages: a project's artifacts are listed a page at a time,
// oldest first, each page after the last artifact of the one before; every
// artifact comes once even when several share a creation time, and a
// cursor that is no artifact of the project is refused.
func TestArtifactPages(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		artifactPagesSuite(t, s)
	})
	t.Run("postgres", func(t *testing.T) { artifactPagesSuite(t, storetest.Postgres(t)) })
}

func artifactPagesSuite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	o, _ := org.New(id("org"), "acme-"+id("n"), now)
	if err := s.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	u, _ := user.New(id("usr"), o.ID(), id("u")+"@acme.test", user.Member, now)
	if err := s.Accounts().CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	var prs []project.Project
	var ths []thread.Thread
	for range 2 {
		pr, _ := project.New(id("prj"), o.ID(), u.ID(), "P", now)
		th, _ := thread.New(id("thr"), o.ID(), pr.ID(), u.ID(), "t", now)
		if err := s.Threads().CreateProject(ctx, pr); err != nil {
			t.Fatal(err)
		}
		if err := s.Threads().CreateThread(ctx, th); err != nil {
			t.Fatal(err)
		}
		prs, ths = append(prs, pr), append(ths, th)
	}
	// Seven artifacts in the first project, three made at the same time;
	// one in the second.
	var want []string
	for i, at := range []time.Duration{0, time.Second, time.Second, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second} {
		a := artifact.Artifact{ID: id("art"), OrgID: o.ID(), ProjectID: prs[0].ID(), ThreadID: ths[0].ID(),
			Path: fmt.Sprintf("/mnt/user-data/outputs/%d.txt", i), Name: "x.txt", SHA256: "aa", Version: 1, CreatedAt: now.Add(at)}
		if err := s.Artifacts().CreateArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
		want = append(want, a.ID)
	}
	// Equal times are ordered by id.
	slices.Sort(want[1:4])
	elsewhere := artifact.Artifact{ID: id("art"), OrgID: o.ID(), ProjectID: prs[1].ID(), ThreadID: ths[1].ID(),
		Path: "/mnt/user-data/outputs/y.txt", Name: "y.txt", SHA256: "bb", Version: 1, CreatedAt: now}
	if err := s.Artifacts().CreateArtifact(ctx, elsewhere); err != nil {
		t.Fatal(err)
	}

	newest := slices.Clone(want)
	slices.Reverse(newest)
	for _, tc := range []struct {
		newestFirst bool
		want        []string
	}{{false, want}, {true, newest}} {
		for _, limit := range []int{1, 2, 3, 7, 8} {
			pageThrough(t, s, o.ID(), prs[0].ID(), limit, tc.newestFirst, tc.want)
		}
	}
	if page, err := s.Artifacts().ArtifactsByProject(ctx, o.ID(), prs[0].ID(), artifact.Page{}); err != nil || len(page) != len(want) {
		t.Fatalf("default page: %d %v", len(page), err)
	}
	for _, after := range []string{elsewhere.ID, "art_missing"} {
		if _, err := s.Artifacts().ArtifactsByProject(ctx, o.ID(), prs[0].ID(), artifact.Page{Limit: 2, After: after}); !fault.Is(err, fault.Invalid) {
			t.Fatalf("after %s: %v, want invalid", after, err)
		}
	}
}

// pageThrough lists a project's artifacts a page of limit at a time and
// checks that they come as want.
func pageThrough(t *testing.T, s *store.Store, orgID, projectID string, limit int, newestFirst bool, want []string) {
	t.Helper()
	ctx := context.Background()
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("limit %d: no end after %d pages: %v", limit, pages, got)
		}
		page, err := s.Artifacts().ArtifactsByProject(ctx, orgID, projectID, artifact.Page{Limit: limit, After: after, NewestFirst: newestFirst})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("limit %d: a page of %d", limit, len(page))
		}
		for _, a := range page {
			got = append(got, a.ID)
		}
		if len(page) < limit || len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("limit %d, newest first %v: pages gave\n%s\nwant\n%s", limit, newestFirst, strings.Join(got, " "), strings.Join(want, " "))
	}
}
