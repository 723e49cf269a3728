package jwt

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"threadbox/app/auth"
)

func TestVerifyCachesSignaturesButNotTime(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	c := New(key, "threadbox", "api")
	now := time.Now()
	c.now = func() time.Time { return now }
	cl := auth.Claims{TokenID: "tok_1", UserID: "usr_1", OrgID: "org_1", Role: "admin", Kind: "api", IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	tok, err := c.Sign(cl)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second verify is answered from the cache
		got, err := c.Verify(tok)
		if err != nil || got.TokenID != "tok_1" || got.UserID != "usr_1" || got.OrgID != "org_1" {
			t.Fatalf("verify %d: %+v %v", i, got, err)
		}
	}
	// A tampered copy is still checked in full.
	if _, err := c.Verify(tok[:len(tok)-3] + strings.Repeat("A", 3)); err == nil {
		t.Fatal("tampered token accepted")
	}
	// Expiry applies to cached tokens too (after the leeway).
	now = now.Add(time.Minute + leeway + time.Second)
	if _, err := c.Verify(tok); err == nil {
		t.Fatal("expired cached token accepted")
	}
	// Another server key does not accept it.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := New(other, "threadbox", "api").Verify(tok); err == nil {
		t.Fatal("token of another key accepted")
	}
}
