package user

import (
	"context"
	"strings"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// TokenKind tells long-lived API tokens from short session tokens.
type TokenKind string

// The token kinds.
const (
	APIToken     TokenKind = "api"
	SessionToken TokenKind = "session"
	SandboxToken TokenKind = "sandbox"
	// RefreshToken is the kind a browser session's refresh token claims;
	// it has no record of its own: its jti is its session's record, whose
	// kind is SessionToken, so it is never accepted as a bearer token.
	RefreshToken TokenKind = "refresh"
	// DownloadTicket is the kind of a short-lived download URL's ticket:
	// its jti is its caller's token record, and it names one resource.
	DownloadTicket TokenKind = "download"
)

// Token is the record of an issued bearer token; its id is the JWT's jti.
type Token struct {
	org.Owned  // its id, its user's org, its user (the owner), when it was issued
	name       string
	kind       TokenKind
	expiresAt  time.Time
	revokedAt  *time.Time
	lastUsedAt *time.Time
}

// NewToken returns a valid token record.
func NewToken(id, userID, orgID, name string, kind TokenKind, now time.Time, ttl time.Duration) (Token, error) {
	name = strings.TrimSpace(name)
	if id == "" || userID == "" || orgID == "" {
		return Token{}, fault.New(fault.Invalid, "token id, user and org are required")
	}
	if len(name) > 200 {
		return Token{}, fault.New(fault.Invalid, "token name must be at most 200 characters")
	}
	if !fault.Storable(name) {
		return Token{}, fault.New(fault.Invalid, "token name must be UTF-8 text without NUL characters")
	}
	if ttl <= 0 {
		return Token{}, fault.New(fault.Invalid, "token lifetime must be positive")
	}
	now = now.UTC()
	return Token{Owned: org.Own(id, orgID, userID, now), name: name, kind: kind, expiresAt: now.Add(ttl)}, nil
}

// RestoreToken rebuilds a token record from storage.
func RestoreToken(id, userID, orgID, name string, kind TokenKind, createdAt, expiresAt time.Time, revokedAt, lastUsedAt *time.Time) Token {
	return Token{org.Own(id, orgID, userID, createdAt), name, kind, expiresAt, revokedAt, lastUsedAt}
}

// Name returns the label given at creation.
func (t Token) Name() string { return t.name }

// Kind returns the token kind.
func (t Token) Kind() TokenKind { return t.kind }

// ExpiresAt returns when the token stops working.
func (t Token) ExpiresAt() time.Time { return t.expiresAt }

// RevokedAt returns when the token was revoked, or nil.
func (t Token) RevokedAt() *time.Time { return copyTime(t.revokedAt) }

// LastUsedAt returns when the token was last seen, or nil.
func (t Token) LastUsedAt() *time.Time { return copyTime(t.lastUsedAt) }

// copyTime returns a copy of *p, so that a caller cannot change a record
// through a getter (records are shared, as by the store's memo).
func copyTime(p *time.Time) *time.Time {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Usable reports whether the token may authenticate at now.
func (t Token) Usable(now time.Time) bool {
	return t.revokedAt == nil && now.Before(t.expiresAt)
}

// Revoke returns the token revoked at now; revoking twice keeps the first time.
func (t Token) Revoke(now time.Time) Token {
	if t.revokedAt == nil {
		n := now.UTC()
		t.revokedAt = &n
	}
	return t
}

// TokenRepository stores token records.
type TokenRepository interface {
	CreateToken(ctx context.Context, t Token) error
	Token(ctx context.Context, id string) (Token, error)
	TokensByUser(ctx context.Context, userID string) ([]Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
	TouchToken(ctx context.Context, id string, at time.Time) error
}
