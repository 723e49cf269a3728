package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

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
		stA := open()
		stB := stA
		if dbURL != "" {
			stB = open()
		}
		a, err := newAuth(cfg, stA)
		if err != nil {
			t.Fatal(err)
		}
		b, err := newAuth(cfg, stB)
		if err != nil {
			t.Fatal(err)
		}
		admin, _, err := a.Bootstrap(ctx, "acme", "admin@acme.test", "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Authenticate(ctx, admin.Token)
		if err != nil {
			t.Fatal(err)
		}

		watch := func(st *store.Store, s *auth.Service) (stop func()) {
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				watchNotices(wctx, st.Notices(), s, nil, slog.New(slog.DiscardHandler))
			}()
			return func() { cancel(); <-done }
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
		ends := func(bound context.Context, what string) {
			t.Helper()
			select {
			case <-bound.Done():
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: the request bound on the other server runs on after the revocation", what)
			}
		}
		stopA := watch(stA, a)
		defer stopA()
		stopB := watch(stB, b)

		// The first request ends once B listens, whether it hears the
		// revocation or finds it as it starts listening: B listens from
		// then on.
		first, id := boundOnB()
		if err := a.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
		ends(first, "revoked as the other server starts listening")

		second, id := boundOnB()
		if second.Err() != nil {
			t.Fatal("a request bound to a live token has ended")
		}
		if err := a.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
		ends(second, "revoked while the other server listens")

		// Told while B does not listen (its database connection lost):
		// B finds it when it listens again.
		stopB()
		third, id := boundOnB()
		if err := a.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
		stopB = watch(stB, b)
		defer stopB()
		ends(third, "revoked while the other server did not listen")
	})
}
