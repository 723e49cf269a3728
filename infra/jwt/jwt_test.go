package jwt

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"
	"unsafe"

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

// TestVerifyKeepsItsOwnCopyOfTheToken: a caller's token string may share
// memory that is reused once the call returns (fasthttp's request buffers
// are); the cache keeps A's claims under A even after those bytes become
// another token. It once kept the caller's string, so the key changed in
// place and a request could be answered with the previous caller's claims.
func TestVerifyKeepsItsOwnCopyOfTheToken(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	c := New(key, "threadbox", "api")
	now := time.Now()
	sign := func(n string) string {
		tok, err := c.Sign(auth.Claims{TokenID: "tok_" + n, UserID: "usr_" + n, OrgID: "org_" + n, Role: "admin", Kind: "api", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	a, b := sign("a"), sign("b")
	if len(a) != len(b) {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	buf := []byte(a) // a request buffer, reused for the next request
	if got, err := c.Verify(unsafe.String(&buf[0], len(buf))); err != nil || got.TokenID != "tok_a" {
		t.Fatalf("verify a: %+v %v", got, err)
	}
	copy(buf, b)
	cached, ok := c.verified.get(a)
	if !ok || cached.TokenID != "tok_a" {
		t.Fatalf("the cache lost a's entry when the caller's buffer was reused: %+v %v", cached, ok)
	}
	for k, v := range c.verified.m {
		if k == b || v.TokenID != "tok_a" {
			t.Fatalf("cache entry %q → %s", k[:16], v.TokenID)
		}
	}
	if got, err := c.Verify(b); err != nil || got.TokenID != "tok_b" {
		t.Fatalf("verify b: %+v %v", got, err)
	}
}
