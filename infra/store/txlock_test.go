package store

import (
	"context"
	"testing"
	"time"
)

// TestTransactionBesidePrepare: on SQLite's single writer connection, a
// statement prepared outside a transaction waits for the connection the
// transaction holds, and a second request for the same statement waits for
// that preparation holding the read lock of GORM's prepared-statement
// cache; the transaction's own new statement must not need that cache's
// write lock (the server hung for good this way after a restart, when the
// cache is cold; found by the chaos soak).
func TestTransactionBesidePrepare(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	done := make(chan error, 1)
	go func() {
		done <- st.InTx(ctx, func(tx *Store) error {
			// Two requests outside run the same new statement: the first
			// prepares it and waits for the connection, the second waits
			// for that preparation while holding the cache's read lock.
			for i := 0; i < 2; i++ {
				go func() { _ = st.db.WithContext(ctx).Exec("SELECT 1 WHERE 1 = ?", 1).Error }()
				time.Sleep(150 * time.Millisecond)
			}
			return tx.db.WithContext(ctx).Exec("SELECT 2 WHERE 2 = ?", 2).Error
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the transaction and a statement prepared outside it deadlocked")
	}

	// A single write runs without a transaction of its own, so it cannot
	// be the transaction of that cycle either.
	if !st.db.Config.SkipDefaultTransaction {
		t.Fatal("single writes run in GORM's default transaction, through the prepared-statement cache")
	}
}
