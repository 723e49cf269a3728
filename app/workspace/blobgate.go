package workspace

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// BlobLock is a read-write lock on the artifact blobs that every server on
// one database shares (infra/store.Locks: a PostgreSQL advisory lock; a
// no-op on the embedded SQLite, which one process uses alone). An artifact
// save holds it shared from writing its blob to committing its row; a
// deletion or collection of unreferenced blobs holds it exclusively, so a
// blob another server is saving right now is never removed as
// unreferenced.
type BlobLock interface {
	// LockArtifactBlobs takes the lock, shared or exclusive, and returns
	// the function that gives it back.
	LockArtifactBlobs(ctx context.Context, exclusive bool) (release func(), err error)
}

// blobGate is the process's side of the artifact blob lock: an in-process
// read-write lock, and, with a shared BlobLock, one shared hold of it for
// all of this process's saves at once (so concurrent saves use one
// database connection for it, not one each).
type blobGate struct {
	local sync.RWMutex

	mu      sync.Mutex
	readers int
	release func()
}

// exclusiveWait bounds how long a deletion waits for saves on other
// servers; past it the blobs are left for the collector.
const exclusiveWait = 30 * time.Second

// shared holds the gate for one artifact save.
func (g *blobGate) shared(ctx context.Context, db BlobLock) (func(), error) {
	g.local.RLock()
	if db == nil {
		return g.local.RUnlock, nil
	}
	g.mu.Lock()
	if g.readers == 0 {
		rel, err := db.LockArtifactBlobs(ctx, false)
		if err != nil {
			g.mu.Unlock()
			g.local.RUnlock()
			return nil, fmt.Errorf("workspace: artifact blob lock: %w", err)
		}
		g.release = rel
	}
	g.readers++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.readers--
		if g.readers == 0 {
			g.release()
			g.release = nil
		}
		g.mu.Unlock()
		g.local.RUnlock()
	}, nil
}

// exclusive holds the gate for removing unreferenced blobs.
func (g *blobGate) exclusive(ctx context.Context, db BlobLock) (func(), error) {
	g.local.Lock()
	if db == nil {
		return g.local.Unlock, nil
	}
	ctx, cancel := context.WithTimeout(ctx, exclusiveWait)
	defer cancel()
	rel, err := db.LockArtifactBlobs(ctx, true)
	if err != nil {
		g.local.Unlock()
		return nil, fmt.Errorf("workspace: artifact blob lock: %w", err)
	}
	return func() {
		rel()
		g.local.Unlock()
	}, nil
}
