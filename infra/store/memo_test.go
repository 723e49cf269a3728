package store

import (
	"context"
	"runtime"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// TestMemoSeesEveryCommit: on SQLite the per-request lookups are served
// from the memo while nothing is committed, and every commit — by this
// store's writer, by another store on the same file (another process, such
// as `threadbox token revoke`) — is seen by the very next lookup.
func TestMemoSeesEveryCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() *Store {
		s, err := Open(ctx, "", dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := open()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b := open() // the other process
	now := time.Now().UTC()
	o, _ := org.New("org_memo", "memo", now)
	u, _ := user.New("usr_memo", o.ID(), "memo@acme.test", user.Member, now)
	tok, _ := user.NewToken("tok_memo", u.ID(), o.ID(), "memo", user.APIToken, now, time.Hour)
	c, _ := container.NewForUser(o.ID(), u.ID(), "memo", now)
	for _, err := range []error{a.Accounts().CreateOrg(ctx, o), a.Accounts().CreateUser(ctx, u), a.Accounts().CreateToken(ctx, tok), a.Containers().CreateContainer(ctx, c)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	hits := func() int64 { return a.reads.memo.hits.Load() }
	creds := func() (user.Token, user.User, org.Org) {
		t.Helper()
		gt, gu, gorg, err := a.Accounts().Credentials(ctx, tok.ID())
		if err != nil {
			t.Fatal(err)
		}
		return gt, gu, gorg
	}

	creds()
	h := hits()
	if gt, _, _ := creds(); hits() != h+1 || gt.ID() != tok.ID() {
		t.Fatalf("second lookup: hits %d → %d, token %q", h, hits(), gt.ID())
	}
	// On Linux the folder's watch tells that nothing was written: the
	// version is not even asked for (once the read connections are open:
	// SQLite opening one, as root, sets the owner of the -wal file).
	creds()
	checks := a.reads.memo.checks.Load()
	creds()
	if got := a.reads.memo.checks.Load(); runtime.GOOS == "linux" && got != checks {
		t.Fatalf("a lookup with nothing committed read the version (%d → %d version queries)", checks, got)
	}

	// A commit by this store's writer.
	if err := a.Accounts().RevokeToken(ctx, tok.ID(), now); err != nil {
		t.Fatal(err)
	}
	if gt, _, _ := creds(); gt.RevokedAt() == nil {
		t.Fatal("the revocation was not seen")
	}
	// Commits by another store on the same file.
	if err := b.Accounts().UpdateUser(ctx, u.WithDisabled(true)); err != nil {
		t.Fatal(err)
	}
	if _, gu, _ := creds(); !gu.Disabled() {
		t.Fatal("the disabled user was not seen")
	}
	if err := b.Accounts().UpdateOrg(ctx, o.WithDisabled(true)); err != nil {
		t.Fatal(err)
	}
	if _, _, gorg := creds(); !gorg.Disabled() {
		t.Fatal("the disabled org was not seen")
	}

	// The container lookup likewise.
	if _, err := a.Containers().Container(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	h = hits()
	if _, err := a.Containers().Container(ctx, c.ID()); err != nil || hits() != h+1 {
		t.Fatalf("second container lookup: hits %d → %d, %v", h, hits(), err)
	}
	if err := b.Containers().UpdateContainer(ctx, c.WithState(container.Removed)); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Containers().Container(ctx, c.ID()); err != nil || got.State() != container.Removed {
		t.Fatalf("after another store's update: state %q, %v", got.State(), err)
	}
	if err := b.Containers().DeleteContainer(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Containers().Container(ctx, c.ID()); err == nil {
		t.Fatal("a deleted container was still found")
	}

	// A record changed through a getter's result does not change the memo.
	gt, _, _ := creds()
	*gt.RevokedAt() = time.Time{}
	if again, _, _ := creds(); again.RevokedAt().IsZero() {
		t.Fatal("the memo's record was changed through a getter")
	}
}
