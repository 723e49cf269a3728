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
	// The WAL index's header tells that nothing was committed: the
	// version is not even asked for.
	creds()
	checks := a.reads.memo.checks.Load()
	creds()
	if got := a.reads.memo.checks.Load(); runtime.GOOS != "windows" && got != checks {
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

// TestWALIndexQuiet: the header reader reports a change on its first look,
// whenever the header moved since its last look, and while the header's two
// copies are unlike (a commit writing them); a header that settled is
// quiet from the next look on.
func TestWALIndexQuiet(t *testing.T) {
	mem := make([]byte, 4*walHeaderWords)
	w := &walIndex{mem: mem}
	put := func(copyIdx int, word int, v byte) { mem[4*(copyIdx*walHeaderWords/2+word)] = v }
	commit := func(v byte) { put(1, 2, v); put(0, 2, v) } // the second copy first, as SQLite writes them
	steps := []struct {
		name  string
		do    func()
		quiet bool
	}{
		{"first look", func() {}, false},
		{"nothing committed", func() {}, true},
		{"nothing committed, again", func() {}, true},
		{"a commit", func() { commit(1) }, false},
		{"after the commit", func() {}, true},
		{"a commit half written: the second copy only", func() { put(1, 2, 2) }, false},
		{"still half written", func() {}, false},
		{"the first copy written", func() { put(0, 2, 2) }, false},
		{"settled", func() {}, true},
		{"two commits between looks", func() { commit(3); commit(4) }, false},
		{"a WAL reset (salts)", func() { put(1, 8, 9); put(0, 8, 9) }, false},
		{"settled again", func() {}, true},
	}
	for _, st := range steps {
		st.do()
		if got := w.quiet(); got != st.quiet {
			t.Fatalf("%s: quiet %v, want %v", st.name, got, st.quiet)
		}
	}
}

// FuzzMemoMatchesCommits: whatever the order of commits by this store and
// by another one on the same file, and of lookups between them, every
// lookup through the memo answers what was last committed, as a query
// would.
func FuzzMemoMatchesCommits(f *testing.F) {
	f.Add([]byte{0, 4, 4, 1, 4, 2, 4, 3, 4})
	f.Add([]byte{4, 4, 0, 0, 4, 1, 1, 4, 5, 5, 2, 5, 3, 5})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 4, 5, 0, 4, 1, 5, 2, 4, 3, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		ctx := context.Background()
		dir := t.TempDir()
		a, err := Open(ctx, "", dir)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if _, err := a.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := Open(ctx, "", dir) // another process on the same file
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		now := time.Now().UTC()
		o, _ := org.New("org_fz", "fz", now)
		u, _ := user.New("usr_fz", o.ID(), "fz@acme.test", user.Member, now)
		tok, _ := user.NewToken("tok_fz", u.ID(), o.ID(), "fz", user.APIToken, now, time.Hour)
		for _, err := range []error{a.Accounts().CreateOrg(ctx, o), a.Accounts().CreateUser(ctx, u), a.Accounts().CreateToken(ctx, tok)} {
			if err != nil {
				t.Fatal(err)
			}
		}
		orgOff, userOff := false, false
		for i, op := range ops {
			by := a
			if op&1 == 1 {
				by = b
			}
			switch op % 6 {
			case 0, 1: // the org switched on or off
				orgOff = !orgOff
				if err := by.Accounts().UpdateOrg(ctx, o.WithDisabled(orgOff)); err != nil {
					t.Fatal(err)
				}
			case 2, 3: // the user switched on or off
				userOff = !userOff
				if err := by.Accounts().UpdateUser(ctx, u.WithDisabled(userOff)); err != nil {
					t.Fatal(err)
				}
			default: // lookups through the memo of one store
				_, gu, gorg, err := by.Accounts().Credentials(ctx, tok.ID())
				if err != nil {
					t.Fatal(err)
				}
				g, err := by.Accounts().Org(ctx, o.ID())
				if err != nil {
					t.Fatal(err)
				}
				if gu.Disabled() != userOff || gorg.Disabled() != orgOff || g.Disabled() != orgOff {
					t.Fatalf("op %d: user disabled %v, org %v and %v; committed: user %v, org %v", i, gu.Disabled(), gorg.Disabled(), g.Disabled(), userOff, orgOff)
				}
			}
		}
	})
}
