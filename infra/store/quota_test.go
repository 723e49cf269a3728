package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"threadbox/domain/artifact"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/project"
	"threadbox/domain/skill"
	"threadbox/domain/thread"
	"threadbox/domain/turn"
	"threadbox/domain/user"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestQuotaStorage runs the policy quotas' storage and counts against
// SQLite and PostgreSQL.
func TestQuotaStorage(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		quotaSuite(t, s)
	})
	t.Run("postgres", func(t *testing.T) { quotaSuite(t, storetest.Postgres(t)) })
}

func quotaSuite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	o, _ := org.New(id("org"), "q-"+id("n"), now)
	other, _ := org.New(id("org"), "q-"+id("n"), now)
	for _, x := range []org.Org{o, other} {
		if err := s.Accounts().CreateOrg(ctx, x); err != nil {
			t.Fatal(err)
		}
	}

	// The quotas are saved with the policy, and read back by both paths.
	q, _ := org.NewQuotas(map[org.Quota]int64{org.RunningSandboxesPerUser: 1, org.RunningSandboxesPerOrg: 2, org.ContainersPerUser: 3, org.StorageBytesPerOrg: 5 << 30})
	if err := s.Accounts().UpdateOrg(ctx, o.WithPolicy(o.Policy().WithQuotas(q))); err != nil {
		t.Fatal(err)
	}
	got, err := s.Accounts().Org(ctx, o.ID())
	if err != nil || got.Policy().Quotas() != q || !got.Policy().Allows(org.CodeExecution) {
		t.Fatalf("quotas round trip: %+v %v", got.Policy(), err)
	}
	u1, _ := user.New(id("usr"), o.ID(), id("a")+"@acme.test", user.Member, now)
	u2, _ := user.New(id("usr"), o.ID(), id("b")+"@acme.test", user.Member, now)
	u3, _ := user.New(id("usr"), other.ID(), id("c")+"@other.test", user.Member, now)
	for _, u := range []user.User{u1, u2, u3} {
		if err := s.Accounts().CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	tok, _ := user.NewToken(id("tok"), u1.ID(), o.ID(), "ci", user.APIToken, now, time.Hour)
	if err := s.Accounts().CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, _, co, err := s.Accounts().Credentials(ctx, tok.ID()); err != nil || co.Policy().Quotas() != q {
		t.Fatalf("credentials' org quotas: %+v %v", co.Policy().Quotas(), err)
	}

	// Counts: u1 has two containers, one running; u2 one, running; the
	// other org's user one, running.
	mk := func(orgID, owner, client string, running bool) container.Container {
		c, err := container.NewForUser(orgID, owner, client, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Containers().CreateContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
		if running {
			c = c.WithState(container.Running)
			if err := s.Containers().UpdateContainer(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	a := mk(o.ID(), u1.ID(), "a", true)
	b := mk(o.ID(), u1.ID(), "b", false)
	c := mk(o.ID(), u2.ID(), "c", true)
	mk(other.ID(), u3.ID(), "d", true)
	counts := []struct {
		name string
		fn   func() (int64, error)
		want int64
	}{
		{"u1 running", func() (int64, error) { return s.Quota().RunningSandboxes(ctx, o.ID(), u1.ID()) }, 1},
		{"u2 running", func() (int64, error) { return s.Quota().RunningSandboxes(ctx, o.ID(), u2.ID()) }, 1},
		{"org running", func() (int64, error) { return s.Quota().RunningSandboxes(ctx, o.ID(), "") }, 2},
		{"u1 containers", func() (int64, error) { return s.Quota().UserContainers(ctx, o.ID(), u1.ID()) }, 2},
		{"u2 containers", func() (int64, error) { return s.Quota().UserContainers(ctx, o.ID(), u2.ID()) }, 1},
		{"u1 in the other org", func() (int64, error) { return s.Quota().UserContainers(ctx, other.ID(), u1.ID()) }, 0},
		{"no artifacts yet", func() (int64, error) { return s.Quota().ArtifactBytes(ctx, o.ID()) }, 0},
	}
	for _, tc := range counts {
		if n, err := tc.fn(); err != nil || n != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, n, err, tc.want)
		}
	}
	ids, err := s.Quota().OrgContainerIDs(ctx, o.ID())
	want := []string{a.ID(), b.ID(), c.ID()}
	slices.Sort(want)
	if err != nil || !slices.Equal(ids, want) {
		t.Fatalf("org containers %v %v, want %v", ids, err, want)
	}

	// Stopping one and deleting another change the counts at once.
	if err := s.Containers().UpdateContainer(ctx, a.WithState(container.Idle)); err != nil {
		t.Fatal(err)
	}
	if err := s.Containers().DeleteContainer(ctx, b.ID()); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Quota().RunningSandboxes(ctx, o.ID(), u1.ID()); err != nil || n != 0 {
		t.Fatalf("u1 running after stop: %d %v", n, err)
	}
	if n, err := s.Quota().UserContainers(ctx, o.ID(), u1.ID()); err != nil || n != 1 {
		t.Fatalf("u1 containers after delete: %d %v", n, err)
	}

	// Artifact bytes: every version of the org's artifacts, whole.
	pr, _ := project.New(id("prj"), o.ID(), u1.ID(), "P", now)
	pr2, _ := project.New(id("prj"), other.ID(), u3.ID(), "P", now)
	for _, p := range []project.Project{pr, pr2} {
		if err := s.Threads().CreateProject(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for i, ar := range []artifact.Artifact{
		{OrgID: o.ID(), ProjectID: pr.ID(), Path: "/mnt/user-data/outputs/a.csv", Version: 1, SizeBytes: 1000},
		{OrgID: o.ID(), ProjectID: pr.ID(), Path: "/mnt/user-data/outputs/a.csv", Version: 2, SizeBytes: 1000},
		{OrgID: o.ID(), ProjectID: pr.ID(), Path: "/mnt/user-data/outputs/b.png", Version: 1, SizeBytes: 7 << 30},
		{OrgID: other.ID(), ProjectID: pr2.ID(), Path: "/mnt/user-data/outputs/c", Version: 1, SizeBytes: 5},
	} {
		ar.ID, ar.ThreadID, ar.Name, ar.MimeType, ar.SHA256, ar.CreatedAt = id("art"), "thr_x", "f", "text/plain", "00", now.Add(time.Duration(i))
		if err := s.Artifacts().CreateArtifact(ctx, ar); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Quota().ArtifactBytes(ctx, o.ID()); err != nil || n != 2000+7<<30 {
		t.Fatalf("artifact bytes %d %v", n, err)
	}

	// Messages and turn logs: the bytes stored, not the characters (é is
	// two bytes), of the org's threads only.
	if n, err := s.Quota().MessageBytes(ctx, o.ID()); err != nil || n != 0 {
		t.Fatalf("message bytes before any thread: %d %v", n, err)
	}
	text := []byte(`[{"type":"text","text":"café"}]`)
	usage := []byte(`{"input_tokens":3}`)
	events := []turn.Event{{Seq: 1, Type: "message_start", Data: []byte(`{"é":1}`)}, {Seq: 2, Type: "message_stop", Data: []byte(`{}`)}}
	for _, x := range []struct {
		org, owner, project string
	}{{o.ID(), u1.ID(), pr.ID()}, {other.ID(), u3.ID(), pr2.ID()}} {
		th, _ := thread.New(id("thr"), x.org, x.project, x.owner, "T", now)
		if err := s.Threads().CreateThread(ctx, th); err != nil {
			t.Fatal(err)
		}
		for _, role := range []thread.Role{thread.User, thread.Assistant} {
			m := thread.RestoreMessage(id("msg"), th.ID(), 0, role, text, usage, true, now, thread.Ending{})
			if _, err := s.Threads().AppendMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		tu, _ := turn.New(id("trn"), th.ID(), x.org, x.owner, now)
		if err := s.Turns().CreateTurn(ctx, tu); err != nil {
			t.Fatal(err)
		}
		if err := s.Turns().AppendTurnEvents(ctx, tu.ID(), events); err != nil {
			t.Fatal(err)
		}
	}
	wantMessages := int64(2 * (len(text) + len(usage)))
	if n, err := s.Quota().MessageBytes(ctx, o.ID()); err != nil || n != wantMessages {
		t.Fatalf("message bytes %d %v, want %d", n, err, wantMessages)
	}
	var wantLog int64
	for _, e := range events {
		wantLog += int64(len(e.Type) + len(e.Data))
	}
	if n, err := s.Quota().TurnLogBytes(ctx, o.ID()); err != nil || n != wantLog {
		t.Fatalf("turn log bytes %d %v, want %d", n, err, wantLog)
	}

	// Skills: the files of every version of the org's skills.
	for i, sk := range []skill.Skill{
		{OrgID: o.ID(), Name: "pdf", Version: 1, SizeBytes: 300},
		{OrgID: o.ID(), Name: "pdf", Version: 2, SizeBytes: 400},
		{OrgID: other.ID(), Name: "pdf", Version: 1, SizeBytes: 9},
	} {
		sk.ID, sk.SHA256, sk.CreatedAt = id("skl"), "ff", now.Add(time.Duration(i))
		if err := s.Skills().CreateSkill(ctx, sk); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Quota().SkillBytes(ctx, o.ID()); err != nil || n != 700 {
		t.Fatalf("skill bytes %d %v, want 700", n, err)
	}

	// Checkpoints: one per container, replaced by the next, summed per
	// org; stale when old or when their container is gone.
	ck := func(c container.Container, sum string, n int64, at time.Time) container.Checkpoint {
		k := container.Checkpoint{ContainerID: c.ID(), OrgID: c.OrgID(), Backend: "gvisor", SHA256: sum, Bytes: n, TakenAt: at}
		if err := s.Containers().SaveCheckpoint(ctx, k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	ck(a, "aa", 1000, now)
	ck(a, "ab", 3000, now) // replaces the first
	ck(b, "bb", 500, now.Add(-48*time.Hour))
	gone := container.Checkpoint{ContainerID: "ctr_gone", OrgID: o.ID(), Backend: "gvisor", SHA256: "cc", Bytes: 7, TakenAt: now}
	if err := s.Containers().SaveCheckpoint(ctx, gone); err != nil {
		t.Fatal(err)
	}
	ck(mk(other.ID(), u3.ID(), "e", false), "ab", 11, now)
	if got, err := s.Containers().ContainerCheckpoint(ctx, a.ID()); err != nil || got.SHA256 != "ab" || got.Bytes != 3000 || !got.TakenAt.Equal(now) {
		t.Fatalf("checkpoint of a: %+v %v", got, err)
	}
	if n, err := s.Quota().CheckpointBytes(ctx, o.ID()); err != nil || n != 3000+500+7 {
		t.Fatalf("checkpoint bytes %d %v, want 3507", n, err)
	}
	if n, err := s.Containers().CheckpointUsers(ctx, o.ID(), "ab"); err != nil || n != 1 {
		t.Fatalf("users of ab in the org: %d %v, want 1 (the other org's does not count)", n, err)
	}
	stale, err := s.Containers().StaleCheckpoints(ctx, now.Add(-24*time.Hour))
	var staleIDs []string
	for _, k := range stale {
		staleIDs = append(staleIDs, k.ContainerID)
	}
	slices.Sort(staleIDs)
	wantStale := []string{b.ID(), "ctr_gone"}
	slices.Sort(wantStale)
	if err != nil || !slices.Equal(staleIDs, wantStale) {
		t.Fatalf("stale checkpoints %v %v, want %v", staleIDs, err, wantStale)
	}
	if err := s.Containers().DeleteCheckpoint(ctx, a.ID(), "aa"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Containers().ContainerCheckpoint(ctx, a.ID()); err != nil {
		t.Fatalf("a checkpoint forgotten by an older archive's name: %v", err)
	}
	if err := s.Containers().DeleteCheckpoint(ctx, a.ID(), "ab"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Containers().ContainerCheckpoint(ctx, a.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("deleted checkpoint: %v, want not found", err)
	}
}
