package auth

import (
	"context"
	"fmt"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/user"
)

// BrowserSession is a signed-in browser: one session record, a refresh
// token naming it (kept by the browser in an HttpOnly cookie) and a
// short-lived access token naming it too (kept in the page's memory).
// Revoking the record ends both at once, in every tab.
type BrowserSession struct {
	// Record is the session's token record; its id is both tokens' jti.
	Record user.Token
	// Refresh is the refresh token, valid until the record expires.
	Refresh string
	// Access is a bearer token of the session, valid until AccessExpiresAt.
	Access          string
	AccessExpiresAt time.Time
}

var errNoSession = fault.New(fault.Unauthenticated, "no session: sign in again")

// LoginBrowser is Login for the web frontend: it checks the password the
// same way and answers with a refresh token and a first access token of
// a new session record that lasts SessionTTL.
func (s *Service) LoginBrowser(ctx context.Context, email, password, addr string) (BrowserSession, error) {
	u, err := s.checkPassword(ctx, email, password, addr)
	if err != nil {
		return BrowserSession{}, err
	}
	now := s.now()
	rec, err := user.NewToken(id.New("tok"), u.ID(), u.OrgID(), "browser session", user.SessionToken, now, s.cfg.SessionTTL)
	if err != nil {
		return BrowserSession{}, err
	}
	refresh, err := s.codec.Sign(Claims{TokenID: rec.ID(), UserID: u.ID(), OrgID: u.OrgID(), Role: u.Role(), Kind: user.RefreshToken, IssuedAt: now, ExpiresAt: rec.ExpiresAt()})
	if err != nil {
		return BrowserSession{}, fmt.Errorf("auth: sign refresh token: %w", err)
	}
	if err := s.store.CreateToken(ctx, rec); err != nil {
		return BrowserSession{}, fmt.Errorf("auth: store session: %w", err)
	}
	out := BrowserSession{Record: rec, Refresh: refresh}
	if out.Access, out.AccessExpiresAt, err = s.signAccess(u, rec, now); err != nil {
		return BrowserSession{}, err
	}
	return out, nil
}

// Refresh returns a new access token for the session a refresh token
// names, while that session is neither revoked nor expired and its user
// and org are enabled. The refresh token itself stays as it is.
func (s *Service) Refresh(ctx context.Context, refresh string) (BrowserSession, error) {
	rec, u, err := s.sessionOf(ctx, refresh)
	if err != nil {
		return BrowserSession{}, err
	}
	out := BrowserSession{Record: rec}
	if out.Access, out.AccessExpiresAt, err = s.signAccess(u, rec, s.now()); err != nil {
		return BrowserSession{}, err
	}
	return out, nil
}

// EndSession revokes the session a refresh token names, and with it every
// access token of the session. A token that names no live session ends
// nothing and is no error: signing out twice is harmless.
func (s *Service) EndSession(ctx context.Context, refresh string) error {
	c, err := s.codec.Verify(refresh)
	if err != nil || c.Kind != user.RefreshToken {
		return nil
	}
	tok, err := s.store.Token(ctx, c.TokenID)
	if fault.Is(err, fault.NotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("auth: end session: %w", err)
	}
	if tok.OwnerID() != c.UserID || tok.Kind() != user.SessionToken || tok.RevokedAt() != nil {
		return nil
	}
	if err := s.store.RevokeToken(ctx, tok.ID(), s.now()); err != nil {
		return fmt.Errorf("auth: end session: %w", err)
	}
	return nil
}

// sessionOf checks a refresh token and returns its live session record
// and user.
func (s *Service) sessionOf(ctx context.Context, refresh string) (user.Token, user.User, error) {
	if refresh == "" {
		return user.Token{}, user.User{}, errNoSession
	}
	c, err := s.codec.Verify(refresh)
	if err != nil || c.Kind != user.RefreshToken {
		return user.Token{}, user.User{}, errNoSession
	}
	tok, u, o, err := s.store.Credentials(ctx, c.TokenID)
	if fault.Is(err, fault.NotFound) {
		return user.Token{}, user.User{}, errNoSession
	} else if err != nil {
		return user.Token{}, user.User{}, fmt.Errorf("auth: session: %w", err)
	}
	if !tok.Usable(s.now()) || tok.Kind() != user.SessionToken || !tok.AccessibleBy(c.OrgID, c.UserID) {
		return user.Token{}, user.User{}, errNoSession
	}
	if u.Disabled() || u.OrgID() != c.OrgID {
		return user.Token{}, user.User{}, fault.New(fault.Unauthenticated, "this user is disabled or no longer exists")
	}
	if o.Disabled() {
		return user.Token{}, user.User{}, fault.New(fault.Unauthenticated, "this organization is disabled")
	}
	return tok, u, nil
}

// signAccess signs an access token of the session rec: a bearer token of
// kind session whose jti is the record's, so Authenticate checks the
// session on every call; it lasts AccessTTL, never past the session.
func (s *Service) signAccess(u user.User, rec user.Token, now time.Time) (string, time.Time, error) {
	exp := now.Add(s.cfg.AccessTTL)
	if rec.ExpiresAt().Before(exp) {
		exp = rec.ExpiresAt()
	}
	tok, err := s.codec.Sign(Claims{TokenID: rec.ID(), UserID: u.ID(), OrgID: u.OrgID(), Role: u.Role(), Kind: user.SessionToken, IssuedAt: now, ExpiresAt: exp})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign access token: %w", err)
	}
	return tok, exp, nil
}

// Me returns the caller's user record.
func (s *Service) Me(ctx context.Context, p user.Principal) (user.User, error) {
	return s.store.User(ctx, p.UserID)
}

// TicketTTL is how long a download ticket is valid: long enough for the
// browser to start the download it was asked for.
const TicketTTL = time.Minute

// DownloadTicket returns a ticket that lets a plain link (no header, no
// cookie) download resource as the caller, for TicketTTL. It names the
// caller's token record, so revoking the session or token ends it too.
func (s *Service) DownloadTicket(p user.Principal, resource string) (string, time.Time, error) {
	if p.TokenID == "" || resource == "" || p.Kind == user.SandboxToken {
		return "", time.Time{}, fault.New(fault.Forbidden, "this caller cannot have download tickets")
	}
	now := s.now()
	exp := now.Add(TicketTTL)
	tok, err := s.codec.Sign(Claims{TokenID: p.TokenID, UserID: p.UserID, OrgID: p.OrgID, Role: p.Role, Kind: user.DownloadTicket, Resource: resource, IssuedAt: now, ExpiresAt: exp})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign download ticket: %w", err)
	}
	return tok, exp, nil
}

// AuthenticateTicket checks a download ticket for resource and returns
// the caller it was given to, checked as Authenticate checks a token: its
// record live, its user and org enabled.
func (s *Service) AuthenticateTicket(ctx context.Context, ticket, resource string) (user.Principal, error) {
	bad := fault.New(fault.Unauthenticated, "invalid or expired download ticket: ask for a new download URL")
	c, err := s.codec.Verify(ticket)
	if err != nil || c.Kind != user.DownloadTicket || c.Resource != resource {
		return user.Principal{}, bad
	}
	tok, u, o, err := s.store.Credentials(ctx, c.TokenID)
	if fault.Is(err, fault.NotFound) {
		return user.Principal{}, bad
	} else if err != nil {
		return user.Principal{}, fmt.Errorf("auth: ticket: %w", err)
	}
	if !tok.Usable(s.now()) || !tok.AccessibleBy(c.OrgID, c.UserID) || tok.Kind() == user.SandboxToken {
		return user.Principal{}, bad
	}
	if u.Disabled() || u.OrgID() != c.OrgID || o.Disabled() {
		return user.Principal{}, fault.New(fault.Unauthenticated, "this user or organization is disabled")
	}
	return user.Principal{UserID: u.ID(), OrgID: u.OrgID(), Role: u.Role(), TokenID: tok.ID(), Kind: tok.Kind()}, nil
}
