package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"threadbox/infra/revocations"
)

// TestServerMakesRevocationsKeptWhileItRuns: a sandbox token revocation
// kept in DATA_DIR while the server runs (another server sharing the
// folder gave it up) is made by the running server's sweep, without a
// restart or a lost database connection; the token here has no record,
// which counts as revoked, so the kept revocation is forgotten.
func TestServerMakesRevocationsKeptWhileItRuns(t *testing.T) {
	s := startServer(t, "", map[string]string{"SWEEP_INTERVAL": "50ms"})
	kept := revocations.New(filepath.Join(s.dataDir, "revocations"))
	if err := kept.Keep("tok_keptelsewhere1", time.Now().Add(time.Hour)); err != nil {
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
}
