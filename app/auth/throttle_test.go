package auth

import (
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var th throttle
	for i := range freeLogins {
		if d := th.wait("a@x", t0); d != 0 {
			t.Fatalf("attempt %d waits %v", i+1, d)
		}
		th.failed("a@x", t0)
	}
	// Past the free attempts each failure doubles the wait, up to the cap.
	steps := []struct {
		after time.Duration
		want  time.Duration
	}{
		{0, time.Second},
		{time.Second, 0},
	}
	for _, s := range steps {
		if d := th.wait("a@x", t0.Add(s.after)); d != s.want {
			t.Fatalf("wait after %v = %v, want %v", s.after, d, s.want)
		}
	}
	th.failed("a@x", t0)
	if d := th.wait("a@x", t0); d != 2*time.Second {
		t.Fatalf("after another failure: %v", d)
	}
	for range 30 {
		th.failed("a@x", t0)
	}
	if d := th.wait("a@x", t0); d != maxLoginWait {
		t.Fatalf("capped wait = %v", d)
	}
	// Other emails are not held back; a success clears the count; a count
	// left alone long enough starts over.
	if d := th.wait("b@x", t0); d != 0 {
		t.Fatalf("another email waits %v", d)
	}
	th.succeeded("a@x")
	if d := th.wait("a@x", t0); d != 0 {
		t.Fatalf("after a success: %v", d)
	}
	for range freeLogins + 3 {
		th.failed("c@x", t0)
	}
	th.failed("c@x", t0.Add(forgetAfter+time.Minute))
	if d := th.wait("c@x", t0.Add(forgetAfter+time.Minute)); d != 0 {
		t.Fatalf("a stale count was kept: %v", d)
	}
}
