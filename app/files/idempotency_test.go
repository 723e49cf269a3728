package files

import (
	"context"
	"testing"
	"time"
)

func TestMemoryIdempotencyTTL(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemoryIdempotency(time.Hour, func() time.Time { return now })
	ctx := context.Background()
	if _, ok, _ := m.Lookup(ctx, "k"); ok {
		t.Fatal("empty map found k")
	}
	if err := m.Save(ctx, "k", Saved{Fingerprint: "f", File: File{ID: "x"}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(59 * time.Minute)
	s, ok, _ := m.Lookup(ctx, "k")
	if !ok || s.Fingerprint != "f" || s.File.ID != "x" {
		t.Fatalf("Lookup before TTL = %+v, %v", s, ok)
	}
	now = now.Add(time.Minute)
	if _, ok, _ := m.Lookup(ctx, "k"); ok {
		t.Fatal("entry outlived its TTL")
	}
	// Saving prunes expired entries.
	_ = m.Save(ctx, "a", Saved{})
	now = now.Add(2 * time.Hour)
	_ = m.Save(ctx, "b", Saved{})
	if len(m.entries) != 1 {
		t.Errorf("%d entries kept, want 1", len(m.entries))
	}
}
