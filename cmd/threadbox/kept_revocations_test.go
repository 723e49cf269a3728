package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"threadbox/infra/revocations"
)

// TestServerMakesRevocationsKeptWhileItRuns: a token revocation kept in
// DATA_DIR while the server runs (another server sharing the folder gave
// it up) is made by the running server's sweep, without a restart or a
// lost database connection: the token stops working, and the kept
// revocation is forgotten.
func TestServerMakesRevocationsKeptWhileItRuns(t *testing.T) {
	s := startServer(t, "", map[string]string{"SWEEP_INTERVAL": "50ms"})
	admin := s.bootstrap("acme", "admin@acme.test")
	created := s.do("POST", appAPI+"/tokens", admin, map[string]any{"name": "kept"}).json(t)
	id, token := created["id"].(string), created["token"].(string)
	if r := s.do("GET", appAPI+"/me", token, nil); r.status != 200 {
		t.Fatalf("the new token: GET /me %d %s", r.status, r.body)
	}
	kept := revocations.New(filepath.Join(s.dataDir, "revocations"))
	if err := kept.Keep(id, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left map[string]time.Time
	waitFor(t, 10*time.Second, func() bool {
		var err error
		if left, err = kept.Kept(); err != nil {
			t.Fatal(err)
		}
		return len(left) == 0
	}, func() string { return fmt.Sprintf("the running server has not made the kept revocations %v", left) })
	if r := s.do("GET", appAPI+"/me", token, nil); r.status != 401 {
		t.Errorf("the token whose revocation was kept: GET /me %d, want 401", r.status)
	}
}
