package workspace

import (
	"context"
	"sync"
	"testing"
	"time"
)

// countingLock is a BlobLock that counts its holds.
type countingLock struct {
	mu                sync.Mutex
	shared, exclusive int
	maxShared         int
}

func (c *countingLock) LockArtifactBlobs(_ context.Context, exclusive bool) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exclusive {
		c.exclusive++
		return func() { c.mu.Lock(); c.exclusive--; c.mu.Unlock() }, nil
	}
	c.shared++
	c.maxShared = max(c.maxShared, c.shared)
	return func() { c.mu.Lock(); c.shared--; c.mu.Unlock() }, nil
}

// TestBlobGate: concurrent saves of one process share one hold of the
// shared lock, given back with the last; a removal waits for the saves of
// this process and takes the lock exclusively.
func TestBlobGate(t *testing.T) {
	ctx := context.Background()
	var g blobGate
	db := &countingLock{}
	var rels []func()
	for range 5 {
		rel, err := g.shared(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	if db.maxShared != 1 || db.shared != 1 {
		t.Fatalf("five saves took %d shared holds (now %d), want one", db.maxShared, db.shared)
	}
	got := make(chan func(), 1)
	go func() {
		rel, _ := g.exclusive(ctx, db)
		got <- rel
	}()
	for i, rel := range rels {
		select {
		case <-got:
			t.Fatalf("a removal ran with %d saves under way", len(rels)-i)
		case <-time.After(20 * time.Millisecond):
		}
		rel()
	}
	rel := <-got
	if db.shared != 0 || db.exclusive != 1 {
		t.Fatalf("during the removal: shared %d, exclusive %d", db.shared, db.exclusive)
	}
	rel()
	if db.exclusive != 0 {
		t.Fatal("the exclusive hold was not given back")
	}
}
