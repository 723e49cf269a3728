// Package jwt signs and verifies threadbox's bearer tokens: EdDSA (Ed25519)
// only, exp required, iss and aud checked, and the key id pinned.
package jwt

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"threadbox/app/auth"
	"threadbox/domain/user"
)

// Codec implements auth.Codec with one Ed25519 key.
type Codec struct {
	verified verifiedCache
	now      func() time.Time
	priv     ed25519.PrivateKey
	pub      ed25519.PublicKey
	kid      string
	issuer   string
	audience string
	parser   *gojwt.Parser
}

type claims struct {
	gojwt.RegisteredClaims
	OrgID       string `json:"org"`
	Role        string `json:"role"`
	Kind        string `json:"kind"`
	ContainerID string `json:"ctr,omitempty"`
	Within      string `json:"wtn,omitempty"`
	Resource    string `json:"res,omitempty"`
}

// New returns a codec for key, issuing and accepting only iss=issuer and aud=audience.
func New(key ed25519.PrivateKey, issuer, audience string) *Codec {
	pub := key.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	c := &Codec{
		now:  time.Now,
		priv: key, pub: pub, kid: hex.EncodeToString(sum[:8]), issuer: issuer, audience: audience,
	}
	c.parser = gojwt.NewParser(
		gojwt.WithValidMethods([]string{gojwt.SigningMethodEdDSA.Alg()}),
		gojwt.WithIssuer(issuer),
		gojwt.WithAudience(audience),
		gojwt.WithExpirationRequired(),
		gojwt.WithIssuedAt(),
		gojwt.WithLeeway(leeway),
		gojwt.WithTimeFunc(func() time.Time { return c.now() }),
	)
	return c
}

// KeyID returns the id of the signing key, sent as the kid header.
func (c *Codec) KeyID() string { return c.kid }

// PublicKey returns the verification key.
func (c *Codec) PublicKey() ed25519.PublicKey { return c.pub }

// Sign returns a signed token for cl.
func (c *Codec) Sign(cl auth.Claims) (string, error) {
	t := gojwt.NewWithClaims(gojwt.SigningMethodEdDSA, claims{
		RegisteredClaims: gojwt.RegisteredClaims{
			ID: cl.TokenID, Subject: cl.UserID, Issuer: c.issuer, Audience: gojwt.ClaimStrings{c.audience},
			IssuedAt: gojwt.NewNumericDate(cl.IssuedAt), NotBefore: gojwt.NewNumericDate(cl.IssuedAt.Add(-time.Second)),
			ExpiresAt: gojwt.NewNumericDate(cl.ExpiresAt),
		},
		OrgID: cl.OrgID, Role: string(cl.Role), Kind: string(cl.Kind), ContainerID: cl.ContainerID, Within: cl.Within, Resource: cl.Resource,
	})
	t.Header["kid"] = c.kid
	s, err := t.SignedString(c.priv)
	if err != nil {
		return "", fmt.Errorf("jwt: sign: %w", err)
	}
	return s, nil
}

// maxTokenLen bounds the work spent on a token.
const maxTokenLen = 8192

// Verify checks the token's signature, algorithm, key id, expiry, issuer and
// audience, and returns its claims.
func (c *Codec) Verify(token string) (auth.Claims, error) {
	if len(token) > maxTokenLen {
		return auth.Claims{}, errors.New("jwt: token too long")
	}
	// A token string whose signature, algorithm, key, issuer and audience
	// were verified stays so; only time can make it invalid, and exp is
	// checked on every use. Revocation is the caller's lookup of the jti.
	if out, ok := c.verified.get(token); ok {
		if c.now().After(out.ExpiresAt.Add(leeway)) {
			return auth.Claims{}, errors.New("jwt: token has expired")
		}
		return out, nil
	}
	var cl claims
	_, err := c.parser.ParseWithClaims(token, &cl, func(t *gojwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid != c.kid {
			return nil, errors.New("unknown key id")
		}
		return c.pub, nil
	})
	if err != nil {
		return auth.Claims{}, fmt.Errorf("jwt: %w", err)
	}
	if cl.ID == "" || cl.Subject == "" || cl.OrgID == "" {
		return auth.Claims{}, errors.New("jwt: missing jti, sub or org")
	}
	out := auth.Claims{TokenID: cl.ID, UserID: cl.Subject, OrgID: cl.OrgID, Role: user.Role(cl.Role), Kind: user.TokenKind(cl.Kind), ContainerID: cl.ContainerID, Within: cl.Within, Resource: cl.Resource}
	if cl.IssuedAt != nil {
		out.IssuedAt = cl.IssuedAt.Time
	}
	out.ExpiresAt = cl.ExpiresAt.Time
	// The key is copied: a caller's string may share memory that is reused
	// after the call (fasthttp's request buffers), and a key changed in
	// place would give one token another token's claims.
	c.verified.put(strings.Clone(token), out)
	return out, nil
}

// leeway is the clock skew allowed on exp, iat and nbf.
const leeway = 30 * time.Second

// verifiedCache remembers the claims of recently verified token strings,
// bounded in size.
type verifiedCache struct {
	mu sync.Mutex
	m  map[string]auth.Claims
}

const verifiedCacheSize = 4096

func (v *verifiedCache) get(token string) (auth.Claims, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.m[token]
	return c, ok
}

func (v *verifiedCache) put(token string, c auth.Claims) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= verifiedCacheSize {
		v.m = make(map[string]auth.Claims, 64)
	}
	v.m[token] = c
}

// LoadOrCreateKey reads an Ed25519 private key (PKCS#8 PEM) from path, or
// generates one there with mode 0600 when the file does not exist.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, false, fmt.Errorf("jwt: generate key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, false, fmt.Errorf("jwt: encode key: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, false, fmt.Errorf("jwt: key dir: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("jwt: write key: %w", err)
		}
		defer f.Close()
		if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
			return nil, false, fmt.Errorf("jwt: write key: %w", err)
		}
		return priv, true, f.Sync()
	}
	if err != nil {
		return nil, false, fmt.Errorf("jwt: read key: %w", err)
	}
	return ParseKey(b)
}

// ParseKey decodes a PKCS#8 PEM Ed25519 private key.
func ParseKey(b []byte) (ed25519.PrivateKey, bool, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, false, errors.New("jwt: key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, false, fmt.Errorf("jwt: parse key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, false, errors.New("jwt: key is not Ed25519")
	}
	return priv, false, nil
}
