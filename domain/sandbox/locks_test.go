package sandbox

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
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
