package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"threadbox/app/batches"
	"threadbox/domain/org"
	"threadbox/domain/user"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestBatchClaims runs the claims of Message Batch requests against
// SQLite and PostgreSQL (two Stores there, as two servers): an org's
// requests run at most perOrg at once, a claim lapses and is taken again
// (counted), only its holder records a result or gives it back (not
// counted), and a batch ends once every request has a result.
func TestBatchClaims(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		batchClaimsSuite(t, s, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s := storetest.Postgres(t)
		other, err := store.Open(context.Background(), s.URL(), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		batchClaimsSuite(t, s, other)
	})
}

func batchClaimsSuite(t *testing.T, a, b *store.Store) {
	ctx := context.Background()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	o, err := org.New(id("org"), "acme", t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	p := user.Principal{UserID: "usr_1", OrgID: o.ID(), Role: user.Admin}
	batch := batches.Batch{ID: id("msgbatch"), Principal: p, Status: batches.InProgress, CreatedAt: t0, ExpiresAt: t0.Add(batches.Window)}
	var reqs []batches.Request
	for _, cid := range []string{"r0", "r1", "r2"} {
		reqs = append(reqs, batches.Request{CustomID: cid, Params: json.RawMessage(`{"model":"m"}`)})
	}
	if err := a.Batches().CreateBatch(ctx, batch, reqs); err != nil {
		t.Fatal(err)
	}
	claim := func(s *store.Store, holder string, now time.Time) []batches.Claimed {
		t.Helper()
		got, err := s.Batches().ClaimRequests(ctx, holder, now, now.Add(10*time.Second), 2, 10)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := claim(a, "srv-a", t0)
	if len(first) != 2 || first[0].CustomID != "r0" || first[1].CustomID != "r1" || first[0].Attempts != 1 || first[0].Principal != p {
		t.Fatalf("first claims %+v", first)
	}
	if got := claim(b, "srv-b", t0.Add(time.Second)); len(got) != 0 {
		t.Fatalf("past the org's two at once: %+v", got)
	}
	// srv-a gives r1 back (a graceful stop): taken at once, not counted.
	if err := a.Batches().ReleaseRequest(ctx, "srv-b", batch.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Batches().ReleaseRequest(ctx, "srv-a", batch.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := claim(b, "srv-b", t0.Add(time.Second)); len(got) != 1 || got[0].CustomID != "r1" || got[0].Attempts != 1 {
		t.Fatalf("a released claim: %+v", got)
	}
	// srv-a dies holding r0: its claim lapses and srv-b takes it, counted.
	later := t0.Add(11 * time.Second)
	if err := b.Batches().RenewRequest(ctx, "srv-b", batch.ID, "r1", later.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := claim(b, "srv-b", later)
	if len(got) != 1 || got[0].CustomID != "r0" || got[0].Attempts != 2 {
		t.Fatalf("a lapsed claim: %+v", got)
	}
	// The dead holder's late result is not recorded; the holder's are.
	if err := a.Batches().FinishRequest(ctx, "srv-a", batch.ID, batches.Result{CustomID: "r0", Status: batches.Errored, ErrorMessage: "late"}); err != nil {
		t.Fatal(err)
	}
	for _, cid := range []string{"r0", "r1"} {
		if err := b.Batches().FinishRequest(ctx, "srv-b", batch.ID, batches.Result{CustomID: cid, Status: batches.Succeeded, Message: []byte(`{"id":"` + cid + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Batches().SettleBatches(ctx, later, later.Add(-batches.Retention)); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Batches().Batch(ctx, o.ID(), batch.ID); got.Status != batches.InProgress || got.Counts.Succeeded != 2 || got.Counts.Processing != 1 {
		t.Fatalf("with one left: %+v", got)
	}
	// A cancel cancels what has not started, and the batch ends.
	if err := b.Batches().CancelBatch(ctx, o.ID(), batch.ID, later); err != nil {
		t.Fatal(err)
	}
	if err := b.Batches().SettleBatches(ctx, later, later.Add(-batches.Retention)); err != nil {
		t.Fatal(err)
	}
	end, _ := a.Batches().Batch(ctx, o.ID(), batch.ID)
	if end.Status != batches.Ended || end.Counts != (batches.Counts{Succeeded: 2, Canceled: 1}) || !end.EndedAt.Equal(later) || !end.CancelInitiatedAt.Equal(later) {
		t.Fatalf("ended %+v", end)
	}
	res, err := a.Batches().Results(ctx, o.ID(), batch.ID)
	if err != nil || len(res) != 3 || res[0].Status != batches.Succeeded || string(res[0].Message) != `{"id":"r0"}` || res[2].Status != batches.Canceled {
		t.Fatalf("results %+v %v", res, err)
	}
	// Past the retention the batch goes.
	gone := later.Add(batches.Retention)
	if err := a.Batches().SettleBatches(ctx, gone, gone.Add(-batches.Retention)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Batches().Batch(ctx, o.ID(), batch.ID); err == nil {
		t.Fatal("a batch past its retention is kept")
	}
}
