package store_test

import (
	"context"
	"testing"
	"time"

	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// twoStores opens two Stores (two servers) on one fresh PostgreSQL database.
func twoStores(t *testing.T) (*store.Store, *store.Store) {
	t.Helper()
	a := storetest.Postgres(t)
	b, err := store.Open(context.Background(), a.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

// acquired reports whether take returns within d.
func acquired(take func() (func(), error), d time.Duration) (func(), bool) {
	got := make(chan func(), 1)
	go func() {
		rel, err := take()
		if err != nil {
			got <- nil
			return
		}
		got <- rel
	}()
	select {
	case rel := <-got:
		return rel, rel != nil
	case <-time.After(d):
		// Still waiting: the caller's release lets it through; drain it.
		return func() {
			if rel := <-got; rel != nil {
				rel()
			}
		}, false
	}
}

// TestLockArtifactBlobsAcrossServers: saves on two servers share the blob
// lock; a removal waits for both, and a save waits for a removal.
func TestLockArtifactBlobsAcrossServers(t *testing.T) {
	ctx := context.Background()
	a, b := twoStores(t)
	relA, err := a.Locks().LockArtifactBlobs(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	relB, ok := acquired(func() (func(), error) { return b.Locks().LockArtifactBlobs(ctx, false) }, 2*time.Second)
	if !ok {
		t.Fatal("a second server's save waited for the first's")
	}
	wait, ok := acquired(func() (func(), error) { return b.Locks().LockArtifactBlobs(ctx, true) }, 300*time.Millisecond)
	if ok {
		t.Fatal("a removal ran during saves")
	}
	relA()
	relB()
	wait() // the removal goes through once the saves are done
	rel, err := a.Locks().LockArtifactBlobs(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	wait, ok = acquired(func() (func(), error) { return b.Locks().LockArtifactBlobs(ctx, false) }, 300*time.Millisecond)
	if ok {
		t.Fatal("a save ran during a removal")
	}
	rel()
	wait()
	// A caller that gives up waiting gets an error, and the lock is free.
	rel, _ = a.Locks().LockArtifactBlobs(ctx, true)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Locks().LockArtifactBlobs(cctx, true); err == nil {
		t.Fatal("a lock held elsewhere was taken")
	}
	rel()
	if rel, ok := acquired(func() (func(), error) { return b.Locks().LockArtifactBlobs(ctx, true) }, 2*time.Second); !ok {
		t.Fatal("the lock stayed taken")
	} else {
		rel()
	}
}

// TestNamedLockAndWantedLeases: a named lock is held by one server at a
// time (other names are free), and a lease wanted on one server is heard
// on the other.
func TestNamedLockAndWantedLeases(t *testing.T) {
	ctx := context.Background()
	a, b := twoStores(t)
	rel, err := a.Locks().Lock(ctx, "skill:org/x")
	if err != nil {
		t.Fatal(err)
	}
	if other, ok := acquired(func() (func(), error) { return b.Locks().Lock(ctx, "skill:org/y") }, 2*time.Second); !ok {
		t.Fatal("another name waited")
	} else {
		other()
	}
	wait, ok := acquired(func() (func(), error) { return b.Locks().Lock(ctx, "skill:org/x") }, 300*time.Millisecond)
	if ok {
		t.Fatal("one name was held by two servers at once")
	}
	rel()
	wait()

	heard := make(chan string, 4)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		b.Notices().Watch(wctx, store.Handlers{WantedLease: func(name string) { heard <- name }})
		close(done)
	}()
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		// The watcher may not listen yet: ask until it hears.
		if err := a.Leases().WantLease(ctx, "sandbox:c1"); err != nil {
			t.Fatal(err)
		}
		select {
		case name := <-heard:
			if name != "sandbox:c1" {
				t.Fatalf("heard %q", name)
			}
			got = true
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("the wanted lease was never heard on the other server")
		}
	}
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not stop with its context")
	}
}
