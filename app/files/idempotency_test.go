package files

import (
	"context"
	"testing"
	"time"
)

func TestMemoryIdempotency(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemoryIdempotency(time.Hour, func() time.Time { return now })
	ctx := context.Background()
	claim := func(key, fp string) (Saved, bool) {
		t.Helper()
		s, ok, err := m.Claim(ctx, key, fp)
		if err != nil {
			t.Fatal(err)
		}
		return s, ok
	}
	if _, ok := claim("k", "f"); !ok {
		t.Fatal("a free key was not claimed")
	}
	// A claimed key is held, for any fingerprint, until it lapses.
	if s, ok := claim("k", "g"); ok || !s.Pending || s.Fingerprint != "f" {
		t.Fatalf("second claim = %+v, %v", s, ok)
	}
	now = now.Add(ClaimTTL)
	if _, ok := claim("k", "g"); !ok {
		t.Fatal("a lapsed claim still held the key")
	}
	// Released, the key is free again; a finished entry is not released.
	if err := m.Release(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok := claim("k", "f"); !ok {
		t.Fatal("a released key was not claimed")
	}
	if err := m.Save(ctx, "k", Saved{Fingerprint: "f", File: File{ID: "x"}}); err != nil {
		t.Fatal(err)
	}
	_ = m.Release(ctx, "k")
	now = now.Add(59 * time.Minute)
	s, ok := claim("k", "f")
	if ok || s.Pending || s.Fingerprint != "f" || s.File.ID != "x" {
		t.Fatalf("claim of a finished key before its TTL = %+v, %v", s, ok)
	}
	now = now.Add(time.Minute)
	if _, ok := claim("k", "f"); !ok {
		t.Fatal("entry outlived its TTL")
	}
	// Saving prunes lapsed entries.
	_ = m.Save(ctx, "a", Saved{})
	now = now.Add(2 * time.Hour)
	_ = m.Save(ctx, "b", Saved{})
	if len(m.entries) != 1 {
		t.Errorf("%d entries kept, want 1", len(m.entries))
	}
}
