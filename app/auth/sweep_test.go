package auth

import (
	"context"
	"errors"
	"testing"
	"time"
)

// sweepStore records the time DeleteEndedTokens is given.
type sweepStore struct {
	Store
	before  time.Time
	deleted int64
	err     error
}

func (s *sweepStore) DeleteEndedTokens(_ context.Context, before time.Time) (int64, error) {
	s.before = before
	return s.deleted, s.err
}

// TestSweepTokensKeepsEndedTokensADay: the sweep deletes only the token
// records that ended EndedTokenGrace (a day) before now, and says how many
// it deleted or why it could not.
func TestSweepTokensKeepsEndedTokensADay(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	st := &sweepStore{deleted: 7}
	s := New(st, nil, nil, Config{})
	s.now = func() time.Time { return now }
	n, err := s.SweepTokens(context.Background())
	if err != nil || n != 7 {
		t.Fatalf("sweep: n=%d err=%v, want 7", n, err)
	}
	if want := now.Add(-24 * time.Hour); !st.before.Equal(want) {
		t.Fatalf("the sweep deleted the records that ended before %s, want before %s", st.before, want)
	}
	st.err = errors.New("database is gone")
	if _, err := s.SweepTokens(context.Background()); !errors.Is(err, st.err) {
		t.Fatalf("a failed sweep: %v, want the store's error wrapped", err)
	}
}
