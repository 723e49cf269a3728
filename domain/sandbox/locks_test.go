package sandbox

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLocks: one id's holders take turns, other ids do not wait for them,
// and an id's entry goes with its last holder.
func TestLocks(t *testing.T) {
	var k Locks
	unlockA := k.Lock("a")
	// Another id is not held up by a.
	k.Lock("b")()
	if n := k.InUse(); n != 1 {
		t.Fatalf("%d ids in use with a held, want 1", n)
	}
	var inside, most, took atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer k.Lock("a")()
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			runtime.Gosched()
			took.Add(1)
			inside.Add(-1)
		}()
	}
	runtime.Gosched()
	if n := took.Load(); n != 0 {
		t.Fatalf("%d holders of a while it was held", n)
	}
	unlockA()
	wg.Wait()
	if took.Load() != 8 || most.Load() != 1 {
		t.Fatalf("%d of 8 waiters took the lock, at most %d at once; want 8, one at a time", took.Load(), most.Load())
	}
	if n := k.InUse(); n != 0 {
		t.Fatalf("%d ids in use after every holder left, want 0", n)
	}
}

// TestLockContext: a waiter whose context ends gives up with its error
// while the holder keeps the lock, takes nothing with it, and leaves no
// entry behind; a free lock is taken whatever the context says.
func TestLockContext(t *testing.T) {
	var k Locks
	unlock := k.Lock("a")
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		release, err := k.LockContext(ctx, "a")
		if err == nil {
			release()
		}
		gaveUp <- err
	}()
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter with its context ended: %v, want context.Canceled", err)
	}
	if n := k.InUse(); n != 1 {
		t.Fatalf("%d ids in use with a held and its waiter gone, want 1", n)
	}
	unlock()
	if n := k.InUse(); n != 0 {
		t.Fatalf("%d ids in use after the holder left, want 0", n)
	}
	release, err := k.LockContext(ctx, "a")
	if err != nil {
		t.Fatalf("a free lock with the context ended: %v, want it taken", err)
	}
	release()
	k.Lock("a")() // the waiter that gave up holds nothing
}

// TestUnlockTwicePanics: releasing a lock twice is a defect of its caller,
// told at once, rather than a release of the lock's next holder or a wait
// that never ends.
func TestUnlockTwicePanics(t *testing.T) {
	var k Locks
	unlock := k.Lock("a")
	unlock()
	k.Lock("a") // the next holder, which keeps it
	panicked := make(chan bool, 1)
	go func() {
		defer func() { panicked <- recover() != nil }()
		unlock()
	}()
	select {
	case p := <-panicked:
		if !p {
			t.Fatal("a second unlock did not panic")
		}
	case <-time.After(time.Minute):
		t.Fatal("a second unlock still waits after a minute")
	}
}
