package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/app/files"
	"threadbox/app/usage"
	"threadbox/domain/audit"
	"threadbox/domain/container"
	"threadbox/domain/egress"
	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/project"
	"threadbox/domain/thread"
	"threadbox/domain/user"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestRepositories runs one suite against SQLite and PostgreSQL.
func TestRepositories(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		suite(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s := storetest.Postgres(t)
		suite(t, s)
	})
}

func id(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

func suite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	v, err := s.Migrate(ctx)
	if err != nil || v < 1 {
		t.Fatalf("migrate: v=%d err=%v", v, err)
	}
	if v2, err := s.Migrate(ctx); err != nil || v2 != v {
		t.Fatalf("second migrate: v=%d err=%v", v2, err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)

	// Orgs and their policy.
	o, _ := org.New(id("org"), "acme-"+id("n"), now)
	if err := s.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	dup, _ := org.New(id("org"), o.Name(), now)
	if err := s.Accounts().CreateOrg(ctx, dup); !fault.Is(err, fault.Conflict) {
		t.Fatalf("duplicate org name: want conflict, got %v", err)
	}
	got, err := s.Accounts().Org(ctx, o.ID())
	if err != nil || got.Name() != o.Name() || !got.Policy().Allows(org.CodeExecution) || got.Policy().MaxUploadBytes() != org.DefaultMaxUploadBytes {
		t.Fatalf("org round trip: %+v %v", got, err)
	}
	f := false
	mb := int64(1234)
	p, _ := got.Policy().Patch(org.PolicyPatch{DownloadsGenerated: &f, MaxUploadBytes: &mb})
	if err := s.Accounts().UpdateOrg(ctx, got.WithPolicy(p).WithDisabled(true)); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Accounts().OrgByName(ctx, o.Name())
	if got.Policy().Allows(org.DownloadsGenerated) || !got.Policy().Allows(org.DownloadsUploaded) || got.Policy().MaxUploadBytes() != 1234 || !got.Disabled() {
		t.Fatalf("policy not saved: %+v", got)
	}
	egressPolicySuite(t, s)
	if _, err := s.Accounts().Org(ctx, "missing"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("missing org: %v", err)
	}
	o2, _ := org.New(id("org"), "other-"+id("n"), now)
	if err := s.Accounts().CreateOrg(ctx, o2); err != nil {
		t.Fatal(err)
	}

	// Users.
	email := id("u") + "@acme.test"
	u, err := user.New(id("usr"), o.ID(), email, user.Admin, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Accounts().CreateUser(ctx, u.WithPasswordHash("h1")); err != nil {
		t.Fatal(err)
	}
	u2, _ := user.New(id("usr"), o.ID(), email, user.Member, now)
	if err := s.Accounts().CreateUser(ctx, u2); !fault.Is(err, fault.Conflict) {
		t.Fatalf("duplicate email: want conflict, got %v", err)
	}
	bad, _ := user.New(id("usr"), "no-such-org", id("x")+"@acme.test", user.Member, now)
	if err := s.Accounts().CreateUser(ctx, bad); err == nil {
		t.Fatal("user in a missing org was stored")
	}
	gu, err := s.Accounts().UserByEmail(ctx, email)
	if err != nil || gu.ID() != u.ID() || gu.PasswordHash() != "h1" || !gu.IsAdmin() {
		t.Fatalf("user round trip: %+v %v", gu, err)
	}
	if err := s.Accounts().UpdateUser(ctx, gu.WithRole(user.Member).WithDisabled(true)); err != nil {
		t.Fatal(err)
	}
	gu, _ = s.Accounts().User(ctx, u.ID())
	if gu.IsAdmin() || !gu.Disabled() {
		t.Fatalf("user update lost: %+v", gu)
	}
	other, _ := user.New(id("usr"), o2.ID(), id("o")+"@other.test", user.Member, now)
	if err := s.Accounts().CreateUser(ctx, other); err != nil {
		t.Fatal(err)
	}
	us, _ := s.Accounts().UsersByOrg(ctx, o.ID())
	if len(us) != 1 || us[0].ID() != u.ID() {
		t.Fatalf("users by org leaked or lost: %d", len(us))
	}

	// Tokens.
	tok, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "ci", user.APIToken, now, time.Hour)
	if err := s.Accounts().CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	sess, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "", user.SessionToken, now, time.Hour)
	s.Accounts().CreateToken(ctx, sess)
	ts, _ := s.Accounts().TokensByUser(ctx, u.ID())
	if len(ts) != 1 || ts[0].ID() != tok.ID() || !ts[0].Usable(now) {
		t.Fatalf("tokens by user: %+v", ts)
	}
	if err := s.Accounts().TouchToken(ctx, tok.ID(), now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Accounts().RevokeToken(ctx, tok.ID(), now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Accounts().RevokeToken(ctx, tok.ID(), now.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	gt, _ := s.Accounts().Token(ctx, tok.ID())
	if gt.Usable(now) || gt.RevokedAt() == nil || !gt.RevokedAt().Equal(now.Add(2*time.Minute)) || gt.LastUsedAt() == nil {
		t.Fatalf("revoke: %+v", gt)
	}
	ct, cu, co, err := s.Accounts().Credentials(ctx, tok.ID())
	if err != nil || ct.ID() != tok.ID() || ct.Usable(now) || cu.ID() != u.ID() || !cu.Disabled() || co.ID() != o.ID() || !co.Disabled() || co.Policy().MaxUploadBytes() != 1234 {
		t.Fatalf("credentials: %+v %+v %+v %v", ct, cu, co, err)
	}
	if _, _, _, err := s.Accounts().Credentials(ctx, "tok_missing"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("credentials of a missing token: %v", err)
	}
	if err := s.Accounts().RevokeToken(ctx, "nope", now); !fault.Is(err, fault.NotFound) {
		t.Fatalf("revoke missing: %v", err)
	}
	// Revoking a user's sessions ends their live sessions and sandbox
	// tokens but the one kept, and returns those it ended.
	box, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "turn", user.SandboxToken, now, time.Hour)
	kept, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "", user.SessionToken, now, time.Hour)
	api, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "ci", user.APIToken, now, time.Hour)
	for _, tk := range []user.Token{box, kept, api} {
		if err := s.Accounts().CreateToken(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	ended, err := s.Accounts().RevokeUserSessions(ctx, u.ID(), kept.ID(), now.Add(4*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	endedIDs := map[string]user.TokenKind{}
	for _, tk := range ended {
		endedIDs[tk.ID()] = tk.Kind()
		if tk.RevokedAt() == nil || !tk.RevokedAt().Equal(now.Add(4*time.Minute)) {
			t.Fatalf("a token revoked with the user's sessions: %+v", tk)
		}
	}
	if len(endedIDs) != 2 || endedIDs[sess.ID()] != user.SessionToken || endedIDs[box.ID()] != user.SandboxToken {
		t.Fatalf("revoking the user's sessions ended %v, want the session %s and the sandbox token %s", endedIDs, sess.ID(), box.ID())
	}
	// Revoking all of a user's tokens ends the live ones, returns them,
	// and keeps the time of those already revoked.
	ended, err = s.Accounts().RevokeUserTokens(ctx, u.ID(), now.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	endedIDs = map[string]user.TokenKind{}
	for _, tk := range ended {
		endedIDs[tk.ID()] = tk.Kind()
	}
	if len(endedIDs) != 2 || endedIDs[kept.ID()] != user.SessionToken || endedIDs[api.ID()] != user.APIToken {
		t.Fatalf("revoking all of the user's tokens ended %v, want %s and %s", endedIDs, kept.ID(), api.ID())
	}
	// The user's revoked sandbox tokens are listed until they expire.
	if got, err := s.Accounts().RevokedSandboxTokens(ctx, u.ID(), now.Add(5*time.Minute)); err != nil || len(got) != 1 || got[0].ID() != box.ID() {
		t.Fatalf("revoked sandbox tokens: %v %v, want %s", got, err, box.ID())
	}
	if got, err := s.Accounts().RevokedSandboxTokens(ctx, u.ID(), now.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("revoked sandbox tokens once expired: %v %v", got, err)
	}
	if gs, _ := s.Accounts().Token(ctx, kept.ID()); gs.Usable(now) || gs.RevokedAt() == nil || !gs.RevokedAt().Equal(now.Add(5*time.Minute)) {
		t.Fatalf("session after revoking all: %+v", gs)
	}
	if gs, _ := s.Accounts().Token(ctx, sess.ID()); !gs.RevokedAt().Equal(now.Add(4 * time.Minute)) {
		t.Fatalf("an earlier revocation was rewritten: %+v", gs)
	}
	if gt, _ := s.Accounts().Token(ctx, tok.ID()); !gt.RevokedAt().Equal(now.Add(2 * time.Minute)) {
		t.Fatalf("an earlier revocation was rewritten: %+v", gt)
	}
	endedTokensSuite(t, s, u, now)

	// Projects are scoped by org.
	pr, _ := project.New(id("prj"), o.ID(), u.ID(), "Research", now)
	if err := s.Threads().CreateProject(ctx, pr); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Threads().Project(ctx, o2.ID(), pr.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("cross-org project: %v", err)
	}
	if err := s.Threads().DeleteProject(ctx, o2.ID(), pr.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("cross-org delete: %v", err)
	}
	renamed, _ := pr.Rename("Renamed", now.Add(time.Second))
	if err := s.Threads().UpdateProject(ctx, renamed); err != nil {
		t.Fatal(err)
	}
	gp, _ := s.Threads().Project(ctx, o.ID(), pr.ID())
	if gp.Name() != "Renamed" {
		t.Fatalf("rename lost: %q", gp.Name())
	}

	// Threads are scoped by org and owner, paged newest first.
	var ids []string
	for i := 0; i < 5; i++ {
		th, _ := thread.New(id("thr"), o.ID(), pr.ID(), u.ID(), fmt.Sprintf("t%d", i), now.Add(time.Duration(i)*time.Second))
		if err := s.Threads().CreateThread(ctx, th); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, th.ID())
	}
	page, _ := s.Threads().Threads(ctx, o.ID(), u.ID(), "", thread.Page{Limit: 2})
	if len(page) != 2 || page[0].ID() != ids[4] || page[1].ID() != ids[3] {
		t.Fatalf("page 1: %v", page)
	}
	page, _ = s.Threads().Threads(ctx, o.ID(), u.ID(), pr.ID(), thread.Page{Limit: 10, Before: page[1].ID()})
	if len(page) != 3 || page[0].ID() != ids[2] {
		t.Fatalf("page 2: %v", page)
	}
	if _, err := s.Threads().Thread(ctx, o.ID(), other.ID(), ids[0]); !fault.Is(err, fault.NotFound) {
		t.Fatalf("other user's thread: %v", err)
	}
	if err := s.Threads().DeleteThread(ctx, o2.ID(), other.ID(), ids[0]); !fault.Is(err, fault.NotFound) {
		t.Fatalf("other org deletes thread: %v", err)
	}

	// A fork being made is found by id and among the unfinished forks,
	// but listed (and searched) only once it is made.
	fk, _ := thread.New(id("thr"), o.ID(), pr.ID(), u.ID(), "Fork of t1", now.Add(time.Minute))
	if err := s.Threads().CreateThread(ctx, fk.AsFork()); err != nil {
		t.Fatal(err)
	}
	listed := func() bool {
		for _, q := range []string{"", "fork of"} {
			page, err := s.Threads().Threads(ctx, o.ID(), u.ID(), "", thread.Page{Limit: 10, Query: q})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(page, func(th thread.Thread) bool { return th.ID() == fk.ID() }) {
				return false
			}
		}
		return true
	}
	unfinished := func() bool {
		forks, err := s.Threads().UnfinishedForks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(forks, func(th thread.Thread) bool { return th.ID() == fk.ID() && th.Forking() && th.OwnerID() == u.ID() })
	}
	if got, err := s.Threads().Thread(ctx, o.ID(), u.ID(), fk.ID()); err != nil || !got.Forking() || listed() || !unfinished() {
		t.Fatalf("fork being made: %v forking %v, listed %v, unfinished %v", err, got.Forking(), listed(), unfinished())
	}
	if err := s.Threads().FinishFork(ctx, o.ID(), other.ID(), fk.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("another user finishes the fork: %v", err)
	}
	if err := s.Threads().FinishFork(ctx, o.ID(), u.ID(), fk.ID()); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Threads().Thread(ctx, o.ID(), u.ID(), fk.ID()); err != nil || got.Forking() || !listed() || unfinished() {
		t.Fatalf("fork made: %v forking %v, listed %v, unfinished %v", err, got.Forking(), listed(), unfinished())
	}
	if err := s.Threads().DeleteThread(ctx, o.ID(), u.ID(), fk.ID()); err != nil {
		t.Fatal(err)
	}

	// Messages keep their order; an incomplete turn is visible as such.
	m1, _ := thread.NewMessage(id("msg"), ids[0], thread.User, []byte(`[{"type":"text","text":"hi"}]`), true, now)
	m1, err = s.Threads().AppendMessage(ctx, m1)
	if err != nil || m1.Seq() != 1 {
		t.Fatalf("append: %v %d", err, m1.Seq())
	}
	m2, _ := thread.NewMessage(id("msg"), ids[0], thread.Assistant, []byte(`[]`), false, now)
	m2, _ = s.Threads().AppendMessage(ctx, m2)
	if err := s.Threads().UpdateMessage(ctx, m2.Finish([]byte(`[{"type":"text","text":"yo"}]`), []byte(`{"input_tokens":1}`))); err != nil {
		t.Fatal(err)
	}
	ms, _ := s.Threads().Messages(ctx, ids[0])
	if len(ms) != 2 || ms[1].Seq() != 2 || !ms[1].Complete() || !strings.Contains(string(ms[1].Content()), "yo") {
		t.Fatalf("messages: %+v", ms)
	}

	// A project's threads, whoever owns them, for deleting it; none from
	// another org.
	mate, _ := user.New(id("usr"), o.ID(), id("m")+"@acme.test", user.Member, now)
	if err := s.Accounts().CreateUser(ctx, mate); err != nil {
		t.Fatal(err)
	}
	mt, _ := thread.New(id("thr"), o.ID(), pr.ID(), mate.ID(), "mate's", now)
	if err := s.Threads().CreateThread(ctx, mt); err != nil {
		t.Fatal(err)
	}
	if all, err := s.Threads().ProjectThreads(ctx, o.ID(), pr.ID()); err != nil || len(all) != 6 {
		t.Fatalf("project threads: %d %v", len(all), err)
	}
	if all, err := s.Threads().ProjectThreads(ctx, o2.ID(), pr.ID()); err != nil || len(all) != 0 {
		t.Fatalf("project threads seen from another org: %d %v", len(all), err)
	}

	// Deleting a project removes its threads and their messages.
	if err := s.Threads().DeleteProject(ctx, o.ID(), pr.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Threads().Thread(ctx, o.ID(), u.ID(), ids[0]); !fault.Is(err, fault.NotFound) {
		t.Fatalf("thread survived its project: %v", err)
	}
	if ms, _ := s.Threads().Messages(ctx, ids[0]); len(ms) != 0 {
		t.Fatalf("messages survived: %d", len(ms))
	}

	// Containers.
	c, _ := container.NewForUser(o.ID(), u.ID(), "my-container", now)
	if err := s.Containers().CreateContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Containers().CreateContainer(ctx, c); !fault.Is(err, fault.Conflict) {
		t.Fatalf("duplicate container: %v", err)
	}
	th, _ := container.NewForThread(o.ID(), u.ID(), id("thr"), now.Add(-2*time.Hour))
	if err := s.Containers().CreateContainer(ctx, th); err != nil {
		t.Fatal(err)
	}
	s.Containers().UpdateContainer(ctx, c.Booted("docker", "proc-1", now.Add(-time.Hour)))
	if running, _ := s.Containers().ContainersInState(ctx, container.Running); len(running) != 1 || running[0].ID() != c.ID() ||
		running[0].Backend() != "docker" || running[0].Holder() != "proc-1" {
		t.Fatalf("running containers: %+v", running)
	}
	// Expiry candidates: made before the cut, never a thread's.
	if old, _ := s.Containers().ContainersCreatedBefore(ctx, now.Add(time.Second)); len(old) != 1 || old[0].ID() != c.ID() {
		t.Fatalf("created before: %+v", old)
	}
	if old, _ := s.Containers().ContainersCreatedBefore(ctx, now.Add(-time.Second)); len(old) != 0 {
		t.Fatalf("created before an earlier cut: %+v", old)
	}
	gc, err := s.Containers().Container(ctx, c.ID())
	if err != nil || gc.ID() != c.ID() || gc.ClientID() != "my-container" || gc.State() != container.Running ||
		gc.OrgID() != c.OrgID() || gc.OwnerID() != c.OwnerID() || gc.ThreadID() != c.ThreadID() ||
		!gc.CreatedAt().Equal(c.CreatedAt()) || !gc.LastActiveAt().Equal(now.Add(-time.Hour)) {
		t.Fatalf("container: %+v %v", gc, err)
	}
	if err := s.Containers().UpdateContainer(ctx, gc.Stopped()); err != nil {
		t.Fatal(err)
	}
	if gc, _ := s.Containers().Container(ctx, c.ID()); gc.State() != container.Idle || gc.Backend() != "" || gc.Holder() != "" {
		t.Fatalf("stopped container: %+v", gc)
	}
	// The skills mark: a new container's folder is empty; the mark is
	// written alone, and an update of the state from an older read keeps it.
	if gc, _ := s.Containers().Container(ctx, c.ID()); gc.MayHoldSkills() {
		t.Fatal("a new container may hold skills")
	}
	if err := s.Containers().MarkSkills(ctx, c.ID(), true); err != nil {
		t.Fatal(err)
	}
	if err := s.Containers().UpdateContainer(ctx, gc.Stopped().Touch(now)); err != nil {
		t.Fatal(err)
	}
	if gc, _ := s.Containers().Container(ctx, c.ID()); !gc.MayHoldSkills() || !gc.LastActiveAt().Equal(now) {
		t.Fatalf("marked, then updated: may hold skills %v, last active %v", gc.MayHoldSkills(), gc.LastActiveAt())
	}
	if err := s.Containers().MarkSkills(ctx, c.ID(), false); err != nil {
		t.Fatal(err)
	}
	if gc, _ := s.Containers().Container(ctx, c.ID()); gc.MayHoldSkills() {
		t.Fatal("unmarked container may hold skills")
	}
	if err := s.Containers().MarkSkills(ctx, "ctr_none", true); !fault.Is(err, fault.NotFound) {
		t.Fatalf("mark of a missing container: %v", err)
	}
	if err := s.Containers().DeleteContainer(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Containers().Container(ctx, c.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("deleted container: %v", err)
	}
	if _, err := s.Containers().Tombstone(ctx, c.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("a deleted container left a tombstone: %v", err)
	}

	// A container expired: its record goes and its tombstone stays, at
	// once; expiring it again keeps the first tombstone.
	old, _ := container.NewForUser(o.ID(), u.ID(), "expiring", now.Add(-48*time.Hour))
	if err := s.Containers().CreateContainer(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Containers().Container(ctx, old.ID()); err != nil { // read once, as a request would
		t.Fatal(err)
	}
	if err := s.Containers().ExpireContainer(ctx, old.Tombstone(now)); err != nil {
		t.Fatalf("expire: %v", err)
	}
	if _, err := s.Containers().Container(ctx, old.ID()); !fault.Is(err, fault.NotFound) {
		t.Fatalf("expired container's record: %v", err)
	}
	want := container.Tombstone{ID: old.ID(), ClientID: "expiring", OrgID: o.ID(), OwnerID: u.ID(), CreatedAt: old.CreatedAt(), ExpiredAt: now}
	if tomb, err := s.Containers().Tombstone(ctx, old.ID()); err != nil || tomb != want {
		t.Fatalf("tombstone %+v %v, want %+v", tomb, err, want)
	}
	if err := s.Containers().ExpireContainer(ctx, old.Tombstone(now.Add(time.Hour))); err != nil {
		t.Fatalf("expire again: %v", err)
	}
	if tomb, err := s.Containers().Tombstone(ctx, old.ID()); err != nil || tomb != want {
		t.Fatalf("tombstone after a second expiry %+v %v, want %+v", tomb, err, want)
	}
	if _, err := s.Containers().Tombstone(ctx, container.UserScopedID(u.ID(), "other")); !fault.Is(err, fault.NotFound) {
		t.Fatalf("tombstone of a container never made: %v", err)
	}

	// Leases: one holder at a time; a lapsed lease goes to the next taker.
	if ok, err := s.Leases().AcquireLease(ctx, "turn:x", "p1", now.Add(time.Minute), now); !ok || err != nil {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	if ok, _ := s.Leases().AcquireLease(ctx, "turn:x", "p2", now.Add(time.Minute), now); ok {
		t.Fatal("a live lease was taken by another holder")
	}
	if ok, _ := s.Leases().AcquireLease(ctx, "turn:x", "p1", now.Add(2*time.Minute), now); !ok {
		t.Fatal("the holder could not take its own lease again")
	}
	if h, _ := s.Leases().LeaseHolder(ctx, "turn:x", now); h != "p1" {
		t.Fatalf("holder %q", h)
	}
	if h, _ := s.Leases().LeaseHolder(ctx, "turn:x", now.Add(3*time.Minute)); h != "" {
		t.Fatalf("a lapsed lease still has holder %q", h)
	}
	if ok, _ := s.Leases().AcquireLease(ctx, "turn:x", "p2", now.Add(4*time.Minute), now.Add(3*time.Minute)); !ok {
		t.Fatal("a lapsed lease could not be taken")
	}
	s.Leases().AcquireLease(ctx, "box:y", "p2", now.Add(time.Minute), now)
	if err := s.Leases().RenewLeases(ctx, "p2", now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Leases().LeaseHolder(ctx, "box:y", now.Add(5*time.Minute)); h != "p2" {
		t.Fatalf("renewed lease holder %q", h)
	}
	s.Leases().ReleaseLease(ctx, "turn:x", "p1") // not p1's any more: nothing happens
	if h, _ := s.Leases().LeaseHolder(ctx, "turn:x", now); h != "p2" {
		t.Fatalf("another holder released p2's lease: %q", h)
	}
	s.Leases().ReleaseLease(ctx, "turn:x", "p2")
	if h, _ := s.Leases().LeaseHolder(ctx, "turn:x", now); h != "" {
		t.Fatalf("released lease held by %q", h)
	}
	s.Leases().ReleaseLeases(ctx, "p2")
	if h, _ := s.Leases().LeaseHolder(ctx, "box:y", now); h != "" {
		t.Fatalf("released leases: box:y held by %q", h)
	}
	// Racing takers: exactly one wins.
	var wins atomic.Int32
	var race sync.WaitGroup
	for i := range 8 {
		race.Add(1)
		go func() {
			defer race.Done()
			if ok, err := s.Leases().AcquireLease(ctx, "race", fmt.Sprint("r", i), now.Add(time.Minute), now); ok && err == nil {
				wins.Add(1)
			}
		}()
	}
	race.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d racing takers won one lease", wins.Load())
	}

	// Audit events are per org, newest first.
	for i := 0; i < 3; i++ {
		e := audit.Event{ID: id("aud"), OrgID: o.ID(), ActorID: u.ID(), Action: "org.features.update", Before: []byte(`{}`), After: []byte(fmt.Sprintf(`{"n":%d}`, i)), At: now.Add(time.Duration(i) * time.Second)}
		if err := s.Accounts().AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := s.Accounts().Events(ctx, o.ID(), 10)
	if len(evs) != 3 || string(evs[0].After) != `{"n":2}` {
		t.Fatalf("events: %+v", evs)
	}
	if evs, _ := s.Accounts().Events(ctx, o2.ID(), 10); len(evs) != 0 {
		t.Fatal("audit events leaked across orgs")
	}

	// Idempotency-Keys of uploads: claimed before the upload, kept a day
	// when it finished, keys and fingerprints as given (NUL separators
	// included), the file object whole.
	keys := s.UploadKeys(24 * time.Hour)
	claim := func(k *store.UploadKeys, key, fp string) (files.Saved, bool) {
		t.Helper()
		saved, ok, err := k.Claim(ctx, key, fp)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return saved, ok
	}
	k1 := o.ID() + "\x00" + u.ID() + "\x00" + id("idem")
	fo := files.File{ID: "file_x", Path: "/mnt/user-data/uploads/a.txt", Key: "a.txt", CreatedAt: now, Filename: "a.txt", MIMEType: "text/plain", SizeBytes: 5, ETag: `"e"`, ScopeID: "s1", Inline: true}
	if _, ok := claim(keys, k1, "s1\x00a.txt"); !ok {
		t.Fatal("a free key was not claimed")
	}
	if held, ok := claim(keys, k1, "s1\x00b.txt"); ok || !held.Pending || held.Fingerprint != "s1\x00a.txt" {
		t.Fatalf("claim of a claimed key: %+v %v", held, ok)
	}
	// A released claim frees the key.
	if err := keys.Release(ctx, k1); err != nil {
		t.Fatal(err)
	}
	if _, ok := claim(keys, k1, "s1\x00a.txt"); !ok {
		t.Fatal("a released key was not claimed")
	}
	if err := keys.Save(ctx, k1, files.Saved{Fingerprint: "s1\x00a.txt", File: fo, At: now}); err != nil {
		t.Fatal(err)
	}
	if err := keys.Release(ctx, k1); err != nil {
		t.Fatal(err)
	}
	saved, ok := claim(keys, k1, "s1\x00a.txt")
	if ok || saved.Pending || saved.Fingerprint != "s1\x00a.txt" || saved.File != fo || !saved.At.Equal(now) {
		t.Fatalf("finished upload key: %+v %v", saved, ok)
	}
	if _, ok := claim(keys, k1+"x", "f"); !ok {
		t.Fatal("another key was held by the entry")
	}
	// An entry older than the ttl is forgotten: the key is claimed again.
	k2 := o.ID() + "\x00" + u.ID() + "\x00" + id("idem")
	if err := keys.Save(ctx, k2, files.Saved{Fingerprint: "old", File: fo, At: now.Add(-25 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := claim(keys, k2, "new"); !ok {
		t.Fatal("an expired entry held its key")
	}
	if err := keys.Save(ctx, k2, files.Saved{Fingerprint: "new", File: fo, At: now}); err != nil {
		t.Fatal(err)
	}
	if got, ok := claim(keys, k2, "new"); ok || got.Fingerprint != "new" {
		t.Fatalf("saved over an expired entry: %+v %v", got, ok)
	}
	// Many claims of one key at once: exactly one holds it.
	k3 := id("idem")
	var wg sync.WaitGroup
	var won atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok, err := keys.Claim(ctx, k3, "f"); err != nil {
				t.Errorf("concurrent claim: %v", err)
			} else if ok {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d concurrent claims held the key, want 1", won.Load())
	}
	// With a shorter memory, all entries are past it (the claims past
	// it too), and the next save forgets them.
	short := s.UploadKeys(time.Nanosecond)
	if _, ok := claim(short, k3, "f"); !ok {
		t.Fatal("a claim past the ttl held its key")
	}
	if err := short.Save(ctx, id("idem"), files.Saved{Fingerprint: "x", File: fo, At: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := claim(keys, k1, "s1\x00a.txt"); !ok {
		t.Fatal("an entry past the ttl was kept")
	}
	usageSuite(t, s, o.ID(), o2.ID(), u, mate)
	egressLedgerSuite(t, s, o.ID(), o2.ID())
	egressSecretsSuite(t, s, o.ID(), o2.ID())
}

// egressSecretsSuite checks org secrets: created, replaced keeping the
// creation time, listed by name per org with the sealed bytes intact,
// deleted.
func egressSecretsSuite(t *testing.T, s *store.Store, orgID, otherOrgID string) {
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	mk := func(org, name, host string, at time.Time, sealed string) egress.Secret {
		sec, err := egress.NewSecret(org, name, []string{host, "*.api.example:443"}, "authorization", "v", at)
		if err != nil {
			t.Fatal(err)
		}
		sec.Value, sec.Sealed = "", []byte(sealed)
		return sec
	}
	for _, sec := range []egress.Secret{mk(orgID, "zeta", "z.example", t0, "\x00\x01z"), mk(orgID, "alpha", "a.example", t0, "a"), mk(otherOrgID, "alpha", "o.example", t0, "o")} {
		if created, err := s.Egress().PutEgressSecret(ctx, sec); err != nil || !created {
			t.Fatalf("put %s: %v %v", sec.Name, created, err)
		}
	}
	if created, err := s.Egress().PutEgressSecret(ctx, mk(orgID, "alpha", "b.example", t0.Add(time.Hour), "b")); err != nil || created {
		t.Fatalf("replace: %v %v", created, err)
	}
	list, err := s.Egress().EgressSecrets(ctx, orgID)
	if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "zeta" {
		t.Fatalf("secrets: %v %+v", err, list)
	}
	a := list[0]
	if string(a.Sealed) != "b" || strings.Join(a.HostStrings(), " ") != "b.example *.api.example:443" || a.Header != "Authorization" ||
		!a.CreatedAt.Equal(t0) || !a.UpdatedAt.Equal(t0.Add(time.Hour)) || a.Value != "" {
		t.Fatalf("replaced secret: %+v", a)
	}
	if string(list[1].Sealed) != "\x00\x01z" {
		t.Fatalf("sealed bytes changed: %q", list[1].Sealed)
	}
	if err := s.Egress().DeleteEgressSecret(ctx, orgID, "zeta"); err != nil {
		t.Fatal(err)
	}
	if err := s.Egress().DeleteEgressSecret(ctx, orgID, "zeta"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("deleting a missing secret: %v", err)
	}
	if other, _ := s.Egress().EgressSecrets(ctx, otherOrgID); len(other) != 1 || string(other[0].Sealed) != "o" {
		t.Fatalf("the other org's secrets: %+v", other)
	}
}

// TestCredentialsDoNotWaitForWriters: the per-request token lookup is
// answered while a write transaction is open (SQLite has one writer
// connection; the lookup has its own readers) and sees a revocation as
// soon as it commits.
func TestCredentialsDoNotWaitForWriters(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			ctx := context.Background()
			var s *store.Store
			if db == "sqlite" {
				var err error
				if s, err = store.Open(ctx, "", t.TempDir()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
			} else {
				s = storetest.Postgres(t)
			}
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			o, _ := org.New(id("org"), "w-"+id("n"), now)
			u, _ := user.New(id("usr"), o.ID(), id("w")+"@acme.test", user.Member, now)
			tok, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "w", user.APIToken, now, time.Hour)
			if err := s.Accounts().CreateOrg(ctx, o); err != nil {
				t.Fatal(err)
			}
			if err := s.Accounts().CreateUser(ctx, u); err != nil {
				t.Fatal(err)
			}
			if err := s.Accounts().CreateToken(ctx, tok); err != nil {
				t.Fatal(err)
			}

			inTx, release := make(chan struct{}), make(chan struct{})
			txDone := make(chan error, 1)
			go func() {
				txDone <- s.InTx(ctx, func(tx *store.Store) error {
					if err := tx.Accounts().RevokeToken(ctx, tok.ID(), now); err != nil {
						return err
					}
					close(inTx)
					<-release
					return nil
				})
			}()
			<-inTx
			got := make(chan error, 1)
			go func() {
				ct, _, _, err := s.Accounts().Credentials(ctx, tok.ID())
				if err == nil && !ct.Usable(now.Add(time.Second)) {
					err = fmt.Errorf("saw the uncommitted revocation")
				}
				got <- err
			}()
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				close(release)
				t.Fatal("the credentials lookup waited for the write transaction")
			}
			close(release)
			if err := <-txDone; err != nil {
				t.Fatal(err)
			}
			if ct, _, _, err := s.Accounts().Credentials(ctx, tok.ID()); err != nil || ct.Usable(now.Add(time.Second)) {
				t.Fatalf("after commit: usable=%v err=%v", ct.Usable(now.Add(time.Second)), err)
			}
		})
	}
}

// usageSuite checks that usage additions add up by upsert, concurrent ones
// too, and that reports sum them per day or per user within the org and the
// span asked for.
func usageSuite(t *testing.T, s *store.Store, orgID, otherOrgID string, admin, mate user.User) {
	ctx := context.Background()
	adds := []usage.Usage{
		{OrgID: orgID, UserID: admin.ID(), Day: "2026-03-01", Counts: usage.Counts{Commands: 1, Wall: 1500 * time.Millisecond, CPU: 700 * time.Millisecond}},
		{OrgID: orgID, UserID: admin.ID(), Day: "2026-03-01", Counts: usage.Counts{InputTokens: 10, OutputTokens: 4}},
		{OrgID: orgID, UserID: mate.ID(), Day: "2026-03-01", Counts: usage.Counts{Commands: 2, Wall: time.Second, CPU: 2 * time.Second}},
		{OrgID: orgID, UserID: admin.ID(), Day: "2026-03-02", Counts: usage.Counts{Commands: 1, Wall: 250 * time.Millisecond, InputTokens: 5}},
		{OrgID: orgID, UserID: admin.ID(), Day: "2026-03-04", Counts: usage.Counts{Commands: 9}},      // past the span below
		{OrgID: otherOrgID, UserID: admin.ID(), Day: "2026-03-01", Counts: usage.Counts{Commands: 7}}, // another org
	}
	for _, u := range adds {
		if err := s.Usage().AddUsage(ctx, u); err != nil {
			t.Fatalf("add usage %+v: %v", u, err)
		}
	}
	// Concurrent additions to one row all count.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := s.Usage().AddUsage(ctx, usage.Usage{OrgID: orgID, UserID: mate.ID(), Day: "2026-03-02", Counts: usage.Counts{Commands: 1, CPU: 10 * time.Millisecond}}); err != nil {
				t.Errorf("concurrent add: %v", err)
			}
		})
	}
	wg.Wait()
	tests := []struct {
		name string
		by   usage.GroupBy
		want []usage.Row
	}{
		{"by day", usage.ByDay, []usage.Row{
			{Day: "2026-03-01", Counts: usage.Counts{Commands: 3, Wall: 2500 * time.Millisecond, CPU: 2700 * time.Millisecond, InputTokens: 10, OutputTokens: 4}},
			{Day: "2026-03-02", Counts: usage.Counts{Commands: 9, Wall: 250 * time.Millisecond, CPU: 80 * time.Millisecond, InputTokens: 5}},
		}},
		{"by user", usage.ByUser, func() []usage.Row {
			a := usage.Row{UserID: admin.ID(), Email: admin.Email(), Counts: usage.Counts{Commands: 2, Wall: 1750 * time.Millisecond, CPU: 700 * time.Millisecond, InputTokens: 15, OutputTokens: 4}}
			m := usage.Row{UserID: mate.ID(), Email: mate.Email(), Counts: usage.Counts{Commands: 10, Wall: time.Second, CPU: 2080 * time.Millisecond}}
			if m.UserID < a.UserID {
				return []usage.Row{m, a}
			}
			return []usage.Row{a, m}
		}()},
	}
	for _, tt := range tests {
		t.Run("usage "+tt.name, func(t *testing.T) {
			got, err := s.Usage().UsageReport(ctx, orgID, "2026-03-01", "2026-03-03", tt.by)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("report:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if got, err := s.Usage().UsageReport(ctx, orgID, "2025-01-01", "2025-12-31", usage.ByDay); err != nil || len(got) != 0 {
		t.Fatalf("empty span: %+v %v", got, err)
	}
	usageScopeSuite(t, s, orgID, admin)
}

// usageScopeSuite checks the reports per container and per thread: usage
// of one day split between a thread's container, a user container and no
// container, named by the container's client id and the thread's title.
func usageScopeSuite(t *testing.T, s *store.Store, orgID string, admin user.User) {
	ctx := context.Background()
	now := time.Now()
	pr, _ := project.New(id("prj"), orgID, admin.ID(), "Metered", now)
	if err := s.Threads().CreateProject(ctx, pr); err != nil {
		t.Fatal(err)
	}
	th, _ := thread.New(id("thr"), orgID, pr.ID(), admin.ID(), "Quarterly numbers", now)
	if err := s.Threads().CreateThread(ctx, th); err != nil {
		t.Fatal(err)
	}
	tc, _ := container.NewForThread(orgID, admin.ID(), th.ID(), now)
	uc, _ := container.NewForUser(orgID, admin.ID(), "scratch", now)
	for _, c := range []container.Container{tc, uc} {
		if err := s.Containers().CreateContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	const day = "2027-05-05" // a day no other usage of the suite is on
	adds := []usage.Usage{
		{OrgID: orgID, UserID: admin.ID(), Day: day, ContainerID: tc.ID(), ThreadID: th.ID(), Counts: usage.Counts{Commands: 2, Wall: 3 * time.Second, CPU: time.Second}},
		{OrgID: orgID, UserID: admin.ID(), Day: day, ContainerID: tc.ID(), ThreadID: th.ID(), Counts: usage.Counts{InputTokens: 100, OutputTokens: 20}},
		{OrgID: orgID, UserID: admin.ID(), Day: day, ContainerID: uc.ID(), Counts: usage.Counts{Commands: 1, Wall: time.Second}},
		{OrgID: orgID, UserID: admin.ID(), Day: day, ContainerID: uc.ID(), Counts: usage.Counts{SandboxTime: time.Minute, SandboxCPU: 2 * time.Second}},
		{OrgID: orgID, UserID: admin.ID(), Day: day, ContainerID: uc.ID(), Counts: usage.Counts{SandboxTime: 30 * time.Second, SandboxCPU: 500 * time.Millisecond}},
		{OrgID: orgID, UserID: admin.ID(), Day: day, Counts: usage.Counts{InputTokens: 7}},
	}
	for _, u := range adds {
		if err := s.Usage().AddUsage(ctx, u); err != nil {
			t.Fatalf("add usage %+v: %v", u, err)
		}
	}
	byContainer := []usage.Row{
		{UserID: admin.ID(), Email: admin.Email(), Counts: usage.Counts{InputTokens: 7}},
		{UserID: admin.ID(), Email: admin.Email(), ContainerID: tc.ID(), ClientID: tc.ClientID(), ThreadID: th.ID(), Counts: usage.Counts{Commands: 2, Wall: 3 * time.Second, CPU: time.Second, InputTokens: 100, OutputTokens: 20}},
		{UserID: admin.ID(), Email: admin.Email(), ContainerID: uc.ID(), ClientID: "scratch", Counts: usage.Counts{Commands: 1, Wall: time.Second, SandboxTime: 90 * time.Second, SandboxCPU: 2500 * time.Millisecond}},
	}
	if byContainer[2].ContainerID < byContainer[1].ContainerID {
		byContainer[1], byContainer[2] = byContainer[2], byContainer[1]
	}
	tests := []struct {
		by   usage.GroupBy
		want []usage.Row
	}{
		{usage.ByContainer, byContainer},
		{usage.ByThread, []usage.Row{
			{Counts: usage.Counts{Commands: 1, Wall: time.Second, InputTokens: 7, SandboxTime: 90 * time.Second, SandboxCPU: 2500 * time.Millisecond}},
			{UserID: admin.ID(), Email: admin.Email(), ThreadID: th.ID(), Title: "Quarterly numbers", Counts: usage.Counts{Commands: 2, Wall: 3 * time.Second, CPU: time.Second, InputTokens: 100, OutputTokens: 20}},
		}},
		{usage.ByDay, []usage.Row{{Day: day, Counts: usage.Counts{Commands: 3, Wall: 4 * time.Second, CPU: time.Second, InputTokens: 107, OutputTokens: 20, SandboxTime: 90 * time.Second, SandboxCPU: 2500 * time.Millisecond}}}},
	}
	for _, tt := range tests {
		t.Run("usage by "+string(tt.by), func(t *testing.T) {
			got, err := s.Usage().UsageReport(ctx, orgID, day, day, tt.by)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("report:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// egressPolicySuite checks that the egress switch and its allowlist are
// saved with the org, and read back by both the org lookup and the
// credentials query.
func egressPolicySuite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	o, _ := org.New(id("org"), "egress-"+id("n"), time.Now())
	if err := s.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	if o.Policy().Allows(org.Egress) {
		t.Fatal("egress is on for a new org")
	}
	on := true
	p, err := o.Policy().Patch(org.PolicyPatch{Egress: &on, EgressAllow: &[]string{"pypi.example", "*.git.example:443"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Accounts().UpdateOrg(ctx, o.WithPolicy(p)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Accounts().OrgByName(ctx, o.Name())
	if err != nil || !got.Policy().Allows(org.Egress) || strings.Join(got.Policy().EgressAllow(), " ") != "pypi.example *.git.example:443" {
		t.Fatalf("egress policy not saved: %v %q", err, got.Policy().EgressAllow())
	}
	u, _ := user.New(id("usr"), o.ID(), id("e")+"@acme.test", user.Member, time.Now())
	if err := s.Accounts().CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	tok, _ := user.NewToken(id("tok"), u.ID(), o.ID(), "egress", user.APIToken, time.Now(), time.Hour)
	if err := s.Accounts().CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	_, _, co, err := s.Accounts().Credentials(ctx, tok.ID())
	if err != nil || co.Policy() != got.Policy() {
		t.Fatalf("credentials read another policy: %v %+v", err, co.Policy().EgressPolicy())
	}
	if err := s.Accounts().UpdateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
}

// egressLedgerSuite checks the ledger: records per org, newest first,
// filtered, paged by cursor.
func egressLedgerSuite(t *testing.T, s *store.Store, orgID, otherOrgID string) {
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Millisecond)
	var recs []egress.Record
	for i := range 5 {
		recs = append(recs, egress.Record{ID: fmt.Sprintf("egr_%02d", i), OrgID: orgID, UserID: "usr_a", ThreadID: "thr_a", ContainerID: "cnt_a",
			Host: "pypi.example", Port: 443, Address: "203.0.114.9", Allowed: i%2 == 0, Rule: "pypi.example", Reason: "",
			BytesUp: int64(i), BytesDown: int64(100 * i), Duration: time.Duration(i) * time.Second, At: base.Add(time.Duration(i/2) * time.Second)})
	}
	recs = append(recs, egress.Record{ID: "egr_x", OrgID: otherOrgID, ContainerID: "cnt_b", Host: "other.example", Port: 80, Rule: egress.RuleNoMatch, Reason: "not listed", At: base})
	if err := s.Egress().AppendEgress(ctx, recs); err != nil {
		t.Fatal(err)
	}
	all, err := s.Egress().EgressRecords(ctx, egress.LedgerFilter{OrgID: orgID})
	if err != nil || len(all) != 5 || all[0].ID != "egr_04" || all[1].ID != "egr_03" || all[4].ID != "egr_00" {
		t.Fatalf("ledger order: %v %+v", err, all)
	}
	if r := all[1]; r.BytesDown != 300 || r.Duration != 3*time.Second || r.Port != 443 || r.Address != "203.0.114.9" || !r.At.Equal(base.Add(time.Second)) || r.Allowed {
		t.Fatalf("record round trip: %+v", r)
	}
	page1, _ := s.Egress().EgressRecords(ctx, egress.LedgerFilter{OrgID: orgID, Limit: 2})
	page2, _ := s.Egress().EgressRecords(ctx, egress.LedgerFilter{OrgID: orgID, Limit: 2, Cursor: egress.Cursor{At: page1[1].At, ID: page1[1].ID}})
	if len(page2) != 2 || page2[0].ID != "egr_02" || page2[1].ID != "egr_01" {
		t.Fatalf("second page: %+v", page2)
	}
	no := false
	denied, _ := s.Egress().EgressRecords(ctx, egress.LedgerFilter{OrgID: orgID, Allowed: &no, After: base.Add(time.Second)})
	if len(denied) != 1 || denied[0].ID != "egr_03" {
		t.Fatalf("denied since a time: %+v", denied)
	}
	if other, _ := s.Egress().EgressRecords(ctx, egress.LedgerFilter{OrgID: otherOrgID, Host: "other.example"}); len(other) != 1 || other[0].ID != "egr_x" {
		t.Fatalf("the other org's ledger: %+v", other)
	}
	if none, _ := s.Egress().EgressRecords(ctx, egress.LedgerFilter{OrgID: orgID, ContainerID: "cnt_b"}); len(none) != 0 {
		t.Fatal("ledger records leaked across orgs")
	}
}

// TestDataDirWithURICharacters: a data folder whose name holds what a
// SQLite URI gives a meaning to ("%", "?", "#") keeps its database in that
// folder, each folder its own.
func TestDataDirWithURICharacters(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for i, name := range []string{"run#1", "run#2", "what?", "100% sure", "a%23b"} {
		dir := filepath.Join(root, name)
		s, err := store.Open(ctx, "", dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := s.Migrate(ctx); err != nil {
			t.Fatalf("%s: migrate: %v", name, err)
		}
		o, _ := org.New(fmt.Sprintf("org_uri%d", i), "uri", time.Now())
		if err := s.Accounts().CreateOrg(ctx, o); err != nil {
			t.Fatalf("%s: an org in a new database: %v", name, err)
		}
		s.Close()
		if _, err := os.Stat(filepath.Join(dir, "threadbox.db")); err != nil {
			t.Fatalf("%s: the database is not in its folder: %v", name, err)
		}
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 5 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the root holds %q, want the five folders only", names)
	}
}

// endedTokensSuite: deleting the token records that ended before a time
// deletes those that expired or were revoked before it, whatever their
// kind, and keeps those that ended since and the live ones; a deleted
// record is gone from the credentials lookup too.
func endedTokensSuite(t *testing.T, s *store.Store, u user.User, now time.Time) {
	t.Helper()
	ctx := context.Background()
	cutoff := now.Add(-24 * time.Hour)
	mk := func(kind user.TokenKind, issued time.Time, ttl time.Duration, revoked *time.Time) user.Token {
		tk, err := user.NewToken(id("tok"), u.ID(), u.OrgID(), "sweep", kind, issued, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Accounts().CreateToken(ctx, tk); err != nil {
			t.Fatal(err)
		}
		if revoked != nil {
			if err := s.Accounts().RevokeToken(ctx, tk.ID(), *revoked); err != nil {
				t.Fatal(err)
			}
		}
		return tk
	}
	longAgo, lately := now.Add(-48*time.Hour), now.Add(-time.Hour)
	gone := []user.Token{
		mk(user.SessionToken, now.Add(-60*time.Hour), 12*time.Hour, nil),        // expired 48 h ago
		mk(user.APIToken, now.Add(-72*time.Hour), 365*24*time.Hour, &longAgo),   // revoked 48 h ago, not expired
		mk(user.SandboxToken, now.Add(-49*time.Hour), 30*time.Minute, &longAgo), // revoked and expired
	}
	kept := []user.Token{
		mk(user.SessionToken, now.Add(-13*time.Hour), 12*time.Hour, nil),          // expired an hour ago
		mk(user.APIToken, now.Add(-72*time.Hour), 365*24*time.Hour, &lately),      // revoked an hour ago
		mk(user.SandboxToken, now.Add(-25*time.Hour), time.Hour+time.Minute, nil), // expired a minute after the cutoff
		mk(user.APIToken, now, time.Hour, nil),                                    // live
	}
	// The lookup of a record before the sweep must not outlive it.
	if _, _, _, err := s.Accounts().Credentials(ctx, gone[0].ID()); err != nil {
		t.Fatal(err)
	}
	n, err := s.Accounts().DeleteEndedTokens(ctx, cutoff)
	if err != nil || n != int64(len(gone)) {
		t.Fatalf("delete ended tokens: n=%d err=%v, want %d", n, err, len(gone))
	}
	for _, tk := range gone {
		if _, err := s.Accounts().Token(ctx, tk.ID()); !fault.Is(err, fault.NotFound) {
			t.Fatalf("a %s token that ended before the cutoff was kept: %v", tk.Kind(), err)
		}
		if _, _, _, err := s.Accounts().Credentials(ctx, tk.ID()); !fault.Is(err, fault.NotFound) {
			t.Fatalf("credentials of a deleted %s token: %v", tk.Kind(), err)
		}
	}
	for _, tk := range kept {
		if _, err := s.Accounts().Token(ctx, tk.ID()); err != nil {
			t.Fatalf("a %s token that ended after the cutoff, or lives, was deleted: %v", tk.Kind(), err)
		}
	}
	if n, err := s.Accounts().DeleteEndedTokens(ctx, cutoff); err != nil || n != 0 {
		t.Fatalf("a second sweep deleted %d (%v), want 0", n, err)
	}
}
