// Package storetest opens throwaway databases for tests: a fresh PostgreSQL
// database per test on the server named by TEST_DATABASE_URL.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver for creating databases

	"threadbox/infra/store"
)

// Postgres returns a migrated-nothing Store on a new database that is dropped
// when the test ends. Without TEST_DATABASE_URL it fails under CI=true and
// skips otherwise.
func Postgres(t testing.TB) *store.Store {
	t.Helper()
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is not set: PostgreSQL is required under CI (scripts/test.sh starts one)")
		}
		t.Skip("TEST_DATABASE_URL not set; run `make test` to start a throwaway PostgreSQL")
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	rand.Read(b)
	name := "tb_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	s, err := store.Open(context.Background(), u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if a, err := sql.Open("pgx", base); err == nil {
			a.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			a.Close()
		}
	})
	return s
}

// PostgresURL creates a fresh, empty database and returns its URL; it is
// dropped when the test ends. Without TEST_DATABASE_URL it fails under
// CI=true and skips otherwise.
func PostgresURL(t testing.TB) string {
	t.Helper()
	s := Postgres(t)
	return s.URL()
}
