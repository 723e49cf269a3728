// Package seal encrypts values kept at rest (the egress secrets of orgs)
// with AES-256-GCM under one install key: the operator's EGRESS_SECRET_KEY,
// or a key file threadbox generates once in its data folder. Each sealed
// value carries its own random nonce and is bound to associated data (the
// row it belongs to), so a sealed value copied to another row does not open.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the size of the install key: 32 bytes, AES-256.
const KeySize = 32

// version prefixes every sealed value, so another scheme can follow.
const version byte = 1

// Box seals and opens values under one key.
type Box struct{ aead cipher.AEAD }

// New returns a box for a KeySize-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal: the key must be %d bytes, not %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plain bound to ad.
func (b *Box) Seal(plain, ad []byte) ([]byte, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	out := append([]byte{version}, nonce...)
	return b.aead.Seal(out, nonce, plain, ad), nil
}

// ErrOpen is returned for a value that does not open under the key and
// its associated data (another key, another row, or changed bytes).
var ErrOpen = errors.New("seal: the value does not open with this key")

// Open decrypts a value Seal returned for the same ad.
func (b *Box) Open(sealed, ad []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < 1+n+b.aead.Overhead() || sealed[0] != version {
		return nil, ErrOpen
	}
	plain, err := b.aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// ParseKey reads a key written as 64 hexadecimal digits or as standard
// base64 (padded or not) of KeySize bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("seal: the key must be %d bytes as 64 hex digits or base64", KeySize)
}

// LoadOrCreateKey reads the key kept at path (hex), or generates one
// there with mode 0600 when the file does not exist. created says which.
// Two processes starting at once on a shared folder agree: the file is
// created exclusively and the loser reads the winner's key.
func LoadOrCreateKey(path string) (key []byte, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, perr := ParseKey(string(b))
		if perr != nil {
			return nil, false, fmt.Errorf("seal: %s: %w", path, perr)
		}
		return k, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("seal: read key: %w", err)
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, false, fmt.Errorf("seal: generate key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("seal: key folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadOrCreateKey(path)
	}
	if err != nil {
		return nil, false, fmt.Errorf("seal: write key: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return nil, false, fmt.Errorf("seal: write key: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, false, fmt.Errorf("seal: write key: %w", err)
	}
	return key, true, nil
}
