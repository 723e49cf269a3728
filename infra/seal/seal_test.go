package seal

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	b, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := b.Seal([]byte("Bearer s3cret"), []byte("org_1/api"))
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := b.Seal([]byte("Bearer s3cret"), []byte("org_1/api"))
	if bytes.Equal(s1, s2) || bytes.Contains(s1, []byte("s3cret")) {
		t.Fatal("sealing is not randomised or leaks the value")
	}
	if p, err := b.Open(s1, []byte("org_1/api")); err != nil || string(p) != "Bearer s3cret" {
		t.Fatalf("Open = %q, %v", p, err)
	}
	if _, err := b.Open(s1, []byte("org_2/api")); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened under another row: %v", err)
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(s1, []byte("org_1/api")); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened under another key: %v", err)
	}
	bad := bytes.Clone(s1)
	bad[len(bad)-1] ^= 1
	if _, err := b.Open(bad, []byte("org_1/api")); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened a changed value: %v", err)
	}
	if _, err := b.Open([]byte{1, 2}, nil); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened a short value: %v", err)
	}
	if _, err := New([]byte("short")); err == nil {
		t.Fatal("a short key was taken")
	}
}

func TestKeys(t *testing.T) {
	key := bytes.Repeat([]byte{0xab}, KeySize)
	for _, s := range []string{hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key) + "\n"} {
		if k, err := ParseKey(s); err != nil || !bytes.Equal(k, key) {
			t.Errorf("ParseKey(%q) = %x, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "abcd", hex.EncodeToString(key[:16]), base64.StdEncoding.EncodeToString(key[:31])} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) took a bad key", s)
		}
	}
	path := filepath.Join(t.TempDir(), "sub", "egress-secret.key")
	k1, created, err := LoadOrCreateKey(path)
	if err != nil || !created || len(k1) != KeySize {
		t.Fatalf("LoadOrCreateKey = %x, %v, %v", k1, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	k2, created, err := LoadOrCreateKey(path)
	if err != nil || created || !bytes.Equal(k1, k2) {
		t.Fatalf("second LoadOrCreateKey = %x, %v, %v", k2, created, err)
	}
}
