package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"threadbox/app/usage"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestCommandRuns runs the records of running commands against SQLite
// and PostgreSQL: seen marks only the holder's, stale lists those not
// seen since, and a run ended by two servers at once (its own, and a
// sweep settling it) counts once. On PostgreSQL the two are two Stores.
func TestCommandRuns(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		runsSuite(t, s, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s := storetest.Postgres(t)
		other, err := store.Open(context.Background(), s.URL(), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		runsSuite(t, s, other)
	})
}

func runsSuite(t *testing.T, a, b *store.Store) {
	ctx := context.Background()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	orgID := id("org")
	run := func(holder string) usage.Run {
		return usage.Run{ID: id("run"), OrgID: orgID, UserID: "usr_1", ContainerID: "usr_1--box", Holder: holder, StartedAt: t0, SeenAt: t0}
	}
	mine, theirs := run("srv-a"), run("srv-b")
	for _, r := range []usage.Run{mine, theirs} {
		if err := a.Usage().StartRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Usage().SeeRuns(ctx, "srv-a", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	stale, err := b.Usage().StaleRuns(ctx, t0.Add(30*time.Second))
	if err != nil || len(stale) != 1 || stale[0].ID != theirs.ID || !stale[0].SeenAt.Equal(t0) || !stale[0].StartedAt.Equal(t0) {
		t.Fatalf("stale runs %+v %v", stale, err)
	}

	// Both servers end the stale run at once, each with its usage: it
	// counts once.
	u := usage.Usage{OrgID: orgID, UserID: "usr_1", Day: "2026-03-02", ContainerID: "usr_1--box", Counts: usage.Counts{Commands: 1, Wall: 8 * time.Second}}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*store.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Usage().EndRuns(ctx, []usage.Ended{{RunID: theirs.ID, Usage: u}}, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The other ends with its usage and a sum of tokens in one go; a run
	// that never started drops its record only.
	notStarted := run("srv-a")
	if err := a.Usage().StartRun(ctx, notStarted); err != nil {
		t.Fatal(err)
	}
	tokens := usage.Usage{OrgID: orgID, UserID: "usr_1", Day: "2026-03-02", Counts: usage.Counts{InputTokens: 10}}
	if err := a.Usage().EndRuns(ctx, []usage.Ended{{RunID: mine.ID, Usage: u}, {RunID: notStarted.ID}}, []usage.Usage{tokens}); err != nil {
		t.Fatal(err)
	}
	rows, err := a.Usage().UsageReport(ctx, orgID, "2026-03-02", "2026-03-02", usage.ByDay)
	if err != nil || len(rows) != 1 || rows[0].Commands != 2 || rows[0].Wall != 16*time.Second || rows[0].InputTokens != 10 {
		t.Fatalf("usage %+v %v", rows, err)
	}
	if stale, err := a.Usage().StaleRuns(ctx, t0.Add(time.Hour)); err != nil || len(stale) != 0 {
		t.Fatalf("records left %+v %v", stale, err)
	}
}

// TestUsageWriteKeys runs keyed usage writes against SQLite and
// PostgreSQL: a write sent again under its key, alone or with the ends of
// runs, adds nothing the second time; a write without a key always adds;
// and a key pruned no longer holds a write back.
func TestUsageWriteKeys(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		usageKeysSuite(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		usageKeysSuite(t, storetest.Postgres(t))
	})
}

func usageKeysSuite(t *testing.T, s *store.Store) {
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	orgID := id("org")
	tokens := func(key string, n int64) usage.Usage {
		return usage.Usage{OrgID: orgID, UserID: "usr_1", Day: "2026-03-02", Key: key, Counts: usage.Counts{InputTokens: n}}
	}
	counted := func() int64 {
		t.Helper()
		rows, err := s.Usage().UsageReport(ctx, orgID, "2026-03-02", "2026-03-02", usage.ByDay)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			return 0
		}
		return rows[0].InputTokens
	}
	for range 2 {
		if err := s.Usage().AddUsage(ctx, tokens("usw_a", 10)); err != nil {
			t.Fatal(err)
		}
	}
	if got := counted(); got != 10 {
		t.Fatalf("a keyed write sent twice counted %d tokens, want 10", got)
	}
	r := usage.Run{ID: id("run"), OrgID: orgID, UserID: "usr_1", ContainerID: "usr_1--box", Holder: "srv-a", StartedAt: time.Now(), SeenAt: time.Now()}
	if err := s.Usage().StartRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	ended := []usage.Ended{{RunID: r.ID, Usage: usage.Usage{OrgID: orgID, UserID: "usr_1", Day: "2026-03-02", Counts: usage.Counts{Commands: 1}}}}
	for range 2 {
		if err := s.Usage().EndRuns(ctx, ended, []usage.Usage{tokens("usw_b", 5), tokens("usw_a", 10)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := counted(); got != 15 {
		t.Fatalf("keyed sums ended with runs twice counted %d tokens, want 15", got)
	}
	for range 2 {
		if err := s.Usage().AddUsage(ctx, tokens("", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if got := counted(); got != 17 {
		t.Fatalf("two writes without a key counted %d tokens in all, want 17", got)
	}
	if err := s.Usage().PruneUsageKeys(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Usage().AddUsage(ctx, tokens("usw_a", 10)); err != nil {
		t.Fatal(err)
	}
	if got := counted(); got != 27 {
		t.Fatalf("a write under a pruned key counted %d tokens in all, want 27", got)
	}
}
