package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"threadbox/app/admin"
	"threadbox/app/auth"
	"threadbox/infra/store"
)

// TestRevocationEndsBoundRequestsOnEveryServer: two servers on one
// database, each with its store and auth service as serve wires them and
// watching the database's notices as serve does (on SQLite, which one
// process uses alone, both services share the process's one store). A
// request bound on one server to a sandbox token ends when the token is
// revoked on the other; one revoked while the server did not listen ends
// when it listens again.
func TestRevocationEndsBoundRequestsOnEveryServer(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		stA, stB, a, b := twoServers(t, dbURL)
		boot, _, err := a.Bootstrap(ctx, "acme", "admin@acme.test", "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Authenticate(ctx, boot.Token)
		if err != nil {
			t.Fatal(err)
		}

		// boundOnB returns the context of a request bound on B to a new
		// sandbox token (a turn's, issued on A) and the token's id.
		boundOnB := func() (context.Context, string) {
			t.Helper()
			tok, err := a.CreateSandboxToken(ctx, p, "ctr_1", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := b.Authenticate(ctx, tok.Token)
			if err != nil {
				t.Fatal(err)
			}
			bound, err := b.Bound(ctx, sp)
			if err != nil {
				t.Fatal(err)
			}
			return bound, tok.Record.ID()
		}
		stopA := watchNoticesOf(stA, a)
		defer stopA()
		stopB := watchNoticesOf(stB, b)

		// The first request ends once B listens, whether it hears the
		// revocation or finds it as it starts listening: B listens from
		// then on.
		first, id := boundOnB()
		if err := a.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
		ends(t, first, "revoked as the other server starts listening")

		second, id := boundOnB()
		if second.Err() != nil {
			t.Fatal("a request bound to a live token has ended")
		}
		if err := a.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
		ends(t, second, "revoked while the other server listens")

		// Told while B does not listen (its database connection lost):
		// B finds it when it listens again.
		stopB()
		third, id := boundOnB()
		if err := a.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
		stopB = watchNoticesOf(stB, b)
		defer stopB()
		ends(t, third, "revoked while the other server did not listen")
	})
}

// TestDisablingAUserEndsTheirBoundRequestsOnEveryServer: two servers on one
// database, as in TestRevocationEndsBoundRequestsOnEveryServer. Requests
// bound on either server to a user's sandbox tokens (a turn's, and a
// nested turn's) end when an admin on one server disables the user, which
// revokes all their tokens at once.
func TestDisablingAUserEndsTheirBoundRequestsOnEveryServer(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		stA, stB, a, b := twoServers(t, dbURL)
		adm, _, err := a.Bootstrap(ctx, "acme", "admin@acme.test", "")
		if err != nil {
			t.Fatal(err)
		}
		ap, err := a.Authenticate(ctx, adm.Token)
		if err != nil {
			t.Fatal(err)
		}
		orgAdmin := admin.New(admin.Deps{Store: stA.Accounts(), Tokens: a, Hash: a.HashPassword})
		member, err := orgAdmin.CreateUser(ctx, ap, admin.NewUser{Email: "member@acme.test"})
		if err != nil {
			t.Fatal(err)
		}
		api, err := a.CreateAPITokenFor(ctx, member.Email(), "ci", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		mp, err := a.Authenticate(ctx, api.Token)
		if err != nil {
			t.Fatal(err)
		}
		stopA := watchNoticesOf(stA, a)
		defer stopA()
		stopB := watchNoticesOf(stB, b)
		defer stopB()

		// bound returns the context of a request bound on s to a sandbox
		// token.
		bound := func(s *auth.Service, token string) context.Context {
			t.Helper()
			sp, err := s.Authenticate(ctx, token)
			if err != nil {
				t.Fatal(err)
			}
			bctx, err := s.Bound(ctx, sp)
			if err != nil {
				t.Fatal(err)
			}
			return bctx
		}
		turn, err := a.CreateSandboxToken(ctx, mp, "ctr_1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		onA := bound(a, turn.Token)
		onB := bound(b, turn.Token)
		tp, err := b.Authenticate(ctx, turn.Token)
		if err != nil {
			t.Fatal(err)
		}
		nested, err := b.CreateSandboxToken(ctx, tp, "ctr_1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		nestedOnB := bound(b, nested.Token)

		disabled := true
		if _, err := orgAdmin.UpdateUser(ctx, ap, member.ID(), admin.UserChange{Disabled: &disabled}); err != nil {
			t.Fatal(err)
		}
		ends(t, onA, "bound on the server that disabled the user")
		ends(t, onB, "bound on the other server")
		ends(t, nestedOnB, "a nested turn's, bound on the other server")
	})
}

// twoServers returns the stores and auth services of two servers on the
// database at dbURL (SQLite when empty: one store for both).
func twoServers(t *testing.T, dbURL string) (stA, stB *store.Store, a, b *auth.Service) {
	t.Helper()
	ctx := context.Background()
	env := map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_URL": dbURL}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	open := func() *store.Store {
		st, err := openStore(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA = open()
	stB = stA
	if dbURL != "" {
		stB = open()
	}
	if a, err = newAuth(cfg, stA); err != nil {
		t.Fatal(err)
	}
	if b, err = newAuth(cfg, stB); err != nil {
		t.Fatal(err)
	}
	return stA, stB, a, b
}

// watchNoticesOf has s hear the notices of the servers on st's database,
// as serve does, until stop is called.
func watchNoticesOf(st *store.Store, s *auth.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchNotices(ctx, st.Notices(), s, nil, nil, slog.New(slog.DiscardHandler))
	}()
	return func() { cancel(); <-done }
}

// ends fails t when the request bound is not ended soon.
func ends(t *testing.T, bound context.Context, what string) {
	t.Helper()
	select {
	case <-bound.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the request runs on after its token was revoked", what)
	}
}
