// Package auth authenticates callers: it issues and verifies bearer tokens,
// logs users in with a password, and bootstraps the first org admin.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// Claims are what a signed token says.
type Claims struct {
	TokenID     string
	UserID      string
	OrgID       string
	Role        user.Role
	Kind        user.TokenKind
	ContainerID string
	// Within names the sandbox token a sandbox token was issued under
	// (user.Principal.Within).
	Within string
	// Resource is what a download ticket opens (one URL path and file).
	Resource  string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// Codec signs and verifies tokens (infra/jwt).
type Codec interface {
	Sign(c Claims) (string, error)
	Verify(token string) (Claims, error)
}

// Store is the persistence auth needs.
type Store interface {
	org.Repository
	user.Repository
	user.TokenRepository
	// Credentials returns a token record with its user and org at once.
	Credentials(ctx context.Context, tokenID string) (user.Token, user.User, org.Org, error)
	// RevokeUserTokens revokes every live token of a user and returns
	// those it revoked.
	RevokeUserTokens(ctx context.Context, userID string, at time.Time) ([]user.Token, error)
	// RevokeUserSessions revokes a user's live sessions and sandbox tokens
	// but the token except, and returns those it revoked.
	RevokeUserSessions(ctx context.Context, userID, except string, at time.Time) ([]user.Token, error)
	// RevokedSandboxTokens returns a user's sandbox tokens that are
	// revoked and had not expired at at.
	RevokedSandboxTokens(ctx context.Context, userID string, at time.Time) ([]user.Token, error)
	// DeleteEndedTokens deletes the token records that expired or were
	// revoked before before and returns how many it deleted.
	DeleteEndedTokens(ctx context.Context, before time.Time) (int64, error)
}

// Config tunes token lifetimes and login throttling; zero values take the
// defaults of throttle.go.
type Config struct {
	SessionTTL time.Duration // password-login tokens and browser sessions
	// AccessTTL is the lifetime of a browser session's access tokens.
	AccessTTL   time.Duration
	APITokenTTL time.Duration // default for API tokens
	// EmailLoginLimit is the attempts per window for one email (and for one
	// email from one address).
	EmailLoginLimit int
	// AddrLoginLimit is the attempts per window from one client address.
	AddrLoginLimit int
	// LoginWindow is the throttling window.
	LoginWindow time.Duration
	// KnownAddressTTL is how long an address that logged in stays known.
	KnownAddressTTL time.Duration
	// PasswordChecks is how many bcrypt checks and hashes run at once
	// (default: the CPU count); PasswordQueue how many more may wait for
	// one (default: four times PasswordChecks). More are refused with 503.
	PasswordChecks int
	PasswordQueue  int
	// Notices tells every server on the database of a revoked token, so
	// that each ends the requests bound to it (nil: this server only).
	Notices Notices
}

// Service is the auth use cases.
type Service struct {
	store  Store
	codec  Codec
	cfg    Config
	now    func() time.Time
	logins *limiter
	gate   *passwordGate
	// compare checks a password against its hash (bcrypt).
	compare func(hash, password []byte) error
	// revocations ends the requests bound to a token revoked (Bound).
	revocations revocations
}

// New returns the auth service.
func New(store Store, logins LoginAttempts, codec Codec, cfg Config) *Service {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.AccessTTL <= 0 {
		cfg.AccessTTL = 10 * time.Minute
	}
	if cfg.APITokenTTL <= 0 {
		cfg.APITokenTTL = 365 * 24 * time.Hour
	}
	if cfg.EmailLoginLimit <= 0 {
		cfg.EmailLoginLimit = defaultEmailLimit
	}
	if cfg.AddrLoginLimit <= 0 {
		cfg.AddrLoginLimit = defaultAddrLimit
	}
	if cfg.LoginWindow <= 0 {
		cfg.LoginWindow = defaultLoginWindow
	}
	if cfg.KnownAddressTTL <= 0 {
		cfg.KnownAddressTTL = defaultKnownAddressTTL
	}
	if cfg.PasswordChecks <= 0 {
		cfg.PasswordChecks = runtime.NumCPU()
	}
	if cfg.PasswordQueue <= 0 {
		cfg.PasswordQueue = 4 * cfg.PasswordChecks
	}
	l := &limiter{store: logins, email: cfg.EmailLoginLimit, addr: cfg.AddrLoginLimit, newAddr: newAddressLimit(cfg.EmailLoginLimit),
		window: cfg.LoginWindow, knownTTL: cfg.KnownAddressTTL}
	return &Service{store: store, codec: codec, cfg: cfg, now: time.Now, logins: l,
		gate: newPasswordGate(cfg.PasswordChecks, cfg.PasswordQueue), compare: bcrypt.CompareHashAndPassword}
}

var errUnauthenticated = fault.New(fault.Unauthenticated, "invalid or expired authentication token")

// Authenticate verifies a bearer token and returns the caller. The token's
// record, user and org are looked up on every call, so a revoked token, a
// disabled user or a disabled org is refused on the very next request.
func (s *Service) Authenticate(ctx context.Context, bearer string) (user.Principal, error) {
	if bearer == "" {
		return user.Principal{}, fault.New(fault.Unauthenticated, "missing bearer token: send Authorization: Bearer <token>")
	}
	c, err := s.codec.Verify(bearer)
	if err != nil {
		return user.Principal{}, fault.Wrap(fault.Unauthenticated, "invalid or expired authentication token", err)
	}
	now := s.now()
	tok, u, o, err := s.store.Credentials(ctx, c.TokenID)
	if fault.Is(err, fault.NotFound) {
		return user.Principal{}, errUnauthenticated
	} else if err != nil {
		return user.Principal{}, fmt.Errorf("auth: token: %w", err)
	}
	// A claim of another kind than its record's is refused: a browser
	// session's refresh token (kind refresh, record kind session) opens
	// only the refresh endpoint, never the API.
	if !tok.Usable(now) || !tok.AccessibleBy(c.OrgID, c.UserID) || tok.Kind() != c.Kind {
		return user.Principal{}, errUnauthenticated
	}
	if u.Disabled() || u.OrgID() != c.OrgID {
		return user.Principal{}, fault.New(fault.Unauthenticated, "this user is disabled or no longer exists")
	}
	if o.Disabled() {
		return user.Principal{}, fault.New(fault.Unauthenticated, "this organization is disabled")
	}
	if c.Within != "" {
		// A sandbox token of a turn started from inside a sandbox ends
		// with the token of the turn that started it.
		if err := s.usableWithin(ctx, c.Within, c.OrgID, c.UserID, now); err != nil {
			return user.Principal{}, err
		}
	}
	if last := tok.LastUsedAt(); last == nil || now.Sub(*last) > time.Minute {
		if err := s.store.TouchToken(ctx, tok.ID(), now); err != nil {
			return user.Principal{}, fmt.Errorf("auth: touch token: %w", err)
		}
	}
	// The role comes from the user record, so a demotion takes effect at once.
	return user.Principal{UserID: u.ID(), OrgID: u.OrgID(), Role: u.Role(), TokenID: tok.ID(), Kind: tok.Kind(), ContainerID: c.ContainerID, Within: c.Within}, nil
}

// usableWithin refuses unless the sandbox token id (the first of a chain
// of sandbox tokens) is usable at now and is the user's.
func (s *Service) usableWithin(ctx context.Context, id, orgID, userID string, now time.Time) error {
	t, err := s.store.Token(ctx, id)
	if fault.Is(err, fault.NotFound) {
		return errUnauthenticated
	} else if err != nil {
		return fmt.Errorf("auth: token: %w", err)
	}
	if !t.Usable(now) || !t.AccessibleBy(orgID, userID) || t.Kind() != user.SandboxToken {
		return fault.New(fault.Unauthenticated, "the turn this sandbox token was made for has ended")
	}
	return nil
}

// Issued is a freshly signed token and its record.
type Issued struct {
	Token  string
	Record user.Token
}

func (s *Service) issue(ctx context.Context, u user.User, kind user.TokenKind, name, containerID string, ttl time.Duration) (Issued, error) {
	return s.issueWithin(ctx, u, kind, name, containerID, "", time.Time{}, ttl)
}

// issueWithin is issue for a token that works only while the sandbox
// token within does ("": no such bound) and expires by notAfter (zero:
// no such bound).
func (s *Service) issueWithin(ctx context.Context, u user.User, kind user.TokenKind, name, containerID, within string, notAfter time.Time, ttl time.Duration) (Issued, error) {
	now := s.now()
	if !notAfter.IsZero() && now.Add(ttl).After(notAfter) {
		ttl = notAfter.Sub(now)
	}
	rec, err := user.NewToken(id.New("tok"), u.ID(), u.OrgID(), name, kind, now, ttl)
	if err != nil {
		return Issued{}, err
	}
	signed, err := s.codec.Sign(Claims{TokenID: rec.ID(), UserID: u.ID(), OrgID: u.OrgID(), Role: u.Role(), Kind: kind, ContainerID: containerID, Within: within, IssuedAt: rec.CreatedAt(), ExpiresAt: rec.ExpiresAt()})
	if err != nil {
		return Issued{}, fmt.Errorf("auth: sign: %w", err)
	}
	if err := s.store.CreateToken(ctx, rec); err != nil {
		return Issued{}, fmt.Errorf("auth: store token: %w", err)
	}
	return Issued{Token: signed, Record: rec}, nil
}

// Login checks an email and password sent from the client address addr and
// returns a short-lived session token. Attempts are throttled per email and
// per address before the password is checked (throttle.go).
func (s *Service) Login(ctx context.Context, email, password, addr string) (Issued, error) {
	u, err := s.checkPassword(ctx, email, password, addr)
	if err != nil {
		return Issued{}, err
	}
	return s.issue(ctx, u, user.SessionToken, "session", "", s.cfg.SessionTTL)
}

// checkPassword is Login's check of an email and password. Every refusal
// after the throttle is the same answer, invalid email or password,
// whether the email is unknown, the password wrong, or the password right
// for a disabled user or a user of a disabled org: only the password's
// owner could tell the last ones apart, and an answer that did would tell
// whoever guessed the password that the guess was right. Those attempts
// count as failures.
func (s *Service) checkPassword(ctx context.Context, email, password, addr string) (user.User, error) {
	bad := fault.New(fault.Unauthenticated, "invalid email or password")
	email = strings.ToLower(strings.TrimSpace(email))
	addr = clientKey(addr)
	if err := s.logins.take(ctx, email, addr, s.now()); err != nil {
		return user.User{}, err
	}
	u, err := s.store.UserByEmail(ctx, email)
	// bcrypt reads 72 bytes at most: a longer password (never set, see
	// HashPassword) would match on its first 72 alone.
	hash := []byte(u.PasswordHash())
	known := err == nil && len(hash) > 0 && len(password) <= 72
	if !known {
		// Spend the same time as a real check so the answer does not tell
		// whether the email exists.
		hash = dummyHash
	}
	var match bool
	if err := s.gate.run(ctx, func() { match = s.compare(hash, []byte(password)) == nil }); err != nil {
		return user.User{}, err
	}
	if !known || !match || u.Disabled() {
		return user.User{}, bad
	}
	if o, err := s.store.Org(ctx, u.OrgID()); err != nil || o.Disabled() {
		return user.User{}, bad
	}
	if err := s.logins.succeeded(ctx, email, addr, s.now()); err != nil {
		return user.User{}, err
	}
	return u, nil
}

var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("threadbox-dummy"), bcrypt.DefaultCost)

// HashPassword is the package's HashPassword within the service's bound
// on concurrent bcrypt work (gate.go), for passwords set over the API.
func (s *Service) HashPassword(password string) (string, error) {
	var (
		h   string
		err error
	)
	if gerr := s.gate.run(context.Background(), func() { h, err = HashPassword(password) }); gerr != nil {
		return "", gerr
	}
	return h, err
}

// HashPassword returns a bcrypt hash, refusing passwords shorter than 8 bytes.
func HashPassword(password string) (string, error) {
	if len(password) < 8 {
		return "", fault.New(fault.Invalid, "password must be at least 8 characters")
	}
	if len(password) > 72 {
		return "", fault.New(fault.Invalid, "password must be at most 72 bytes")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return "", fmt.Errorf("auth: hash: %w", err)
	}
	return string(h), nil
}

// CreateAPIToken issues a long-lived API token for the caller.
func (s *Service) CreateAPIToken(ctx context.Context, p user.Principal, name string, ttl time.Duration) (Issued, error) {
	u, err := s.store.User(ctx, p.UserID)
	if err != nil {
		return Issued{}, err
	}
	return s.CreateAPITokenFor(ctx, u.Email(), name, ttl)
}

// CreateAPITokenFor issues an API token for the user with email (operator CLI).
func (s *Service) CreateAPITokenFor(ctx context.Context, email, name string, ttl time.Duration) (Issued, error) {
	u, err := s.store.UserByEmail(ctx, strings.ToLower(strings.TrimSpace(email)))
	if err != nil {
		return Issued{}, err
	}
	if ttl == 0 {
		ttl = s.cfg.APITokenTTL
	}
	if ttl < time.Minute || ttl > 10*365*24*time.Hour {
		return Issued{}, fault.New(fault.Invalid, "token lifetime must be between 1 minute and 10 years")
	}
	return s.issue(ctx, u, user.APIToken, name, "", ttl)
}

// CreateSandboxToken issues a short-lived token acting as the caller, usable
// only for the given container. When the caller is itself a sandbox token
// (a turn started from inside a sandbox), the new token is bound to the
// first sandbox token of the chain: it expires no later and stops working
// when that one is revoked at the end of its turn, so work started from
// inside a sandbox cannot go on issuing itself tokens after the turn.
func (s *Service) CreateSandboxToken(ctx context.Context, p user.Principal, containerID string, ttl time.Duration) (Issued, error) {
	u, err := s.store.User(ctx, p.UserID)
	if err != nil {
		return Issued{}, err
	}
	if p.Kind == user.SandboxToken {
		within := p.Within
		if within == "" {
			within = p.TokenID
		}
		root, err := s.store.Token(ctx, within)
		if err != nil {
			return Issued{}, fmt.Errorf("auth: token: %w", err)
		}
		if !root.Usable(s.now()) || !root.AccessibleBy(p.OrgID, p.UserID) {
			return Issued{}, fault.New(fault.Unauthenticated, "the turn this sandbox token was made for has ended")
		}
		return s.issueWithin(ctx, u, user.SandboxToken, "sandbox", containerID, within, root.ExpiresAt(), ttl)
	}
	return s.issue(ctx, u, user.SandboxToken, "sandbox", containerID, ttl)
}

// Tokens lists the API tokens of the user with email (operator CLI) or, when
// p is set, of the caller.
func (s *Service) Tokens(ctx context.Context, userID string) ([]user.Token, error) {
	return s.store.TokensByUser(ctx, userID)
}

// TokensByEmail lists the API tokens of the user with email.
func (s *Service) TokensByEmail(ctx context.Context, email string) ([]user.Token, error) {
	u, err := s.store.UserByEmail(ctx, strings.ToLower(strings.TrimSpace(email)))
	if err != nil {
		return nil, err
	}
	return s.store.TokensByUser(ctx, u.ID())
}

// RevokeOwn revokes one of the caller's tokens; another user's is not found.
func (s *Service) RevokeOwn(ctx context.Context, p user.Principal, tokenID string) error {
	t, err := s.store.Token(ctx, tokenID)
	if err != nil {
		return err
	}
	if !t.AccessibleBy(p.OrgID, p.UserID) {
		return fault.New(fault.NotFound, "token not found")
	}
	return s.revoke(ctx, tokenID)
}

// Revoke revokes any token by id (operator CLI, and a turn's sandbox token
// when the turn ends).
func (s *Service) Revoke(ctx context.Context, tokenID string) error {
	return s.revoke(ctx, tokenID)
}

// RevokeUserTokens revokes every live token of a user (a password reset,
// a disabled account) and ends the requests bound to them on every server,
// as Revoke does. A failure may be retried: the retry tells the servers
// again of the user's sandbox tokens revoked before (announceUser).
func (s *Service) RevokeUserTokens(ctx context.Context, userID string) error {
	now := s.now()
	toks, err := s.store.RevokeUserTokens(ctx, userID, now)
	if err != nil {
		return fmt.Errorf("auth: revoke the user's tokens: %w", err)
	}
	return s.announceUser(ctx, userID, toks, now)
}

// RevokeUserSessions revokes a user's live sessions and sandbox tokens but
// the token except (a user changing their own password keeps the session
// they changed it from) and ends the requests bound to them on every
// server, as Revoke does.
func (s *Service) RevokeUserSessions(ctx context.Context, userID, except string) error {
	now := s.now()
	toks, err := s.store.RevokeUserSessions(ctx, userID, except, now)
	if err != nil {
		return fmt.Errorf("auth: revoke the user's sessions: %w", err)
	}
	return s.announceUser(ctx, userID, toks, now)
}

// announceUser passes to announceAll the tokens toks a bulk revocation of
// the user's tokens has just revoked and, with them, the user's sandbox
// tokens revoked before that have not expired. The store returns only the
// tokens it revoked, so when the notice of an earlier attempt failed, the
// caller's retry finds those tokens revoked already: without the second
// list the other servers would never hear of them, and their requests
// bound to them would run on until the tokens expire. Telling a server
// twice of a token ends nothing more.
func (s *Service) announceUser(ctx context.Context, userID string, toks []user.Token, now time.Time) error {
	earlier, err := s.store.RevokedSandboxTokens(ctx, userID, now)
	if err != nil {
		err = fmt.Errorf("auth: the user's revoked sandbox tokens: %w", err)
	}
	seen := make(map[string]bool, len(toks))
	for _, t := range toks {
		seen[t.ID()] = true
	}
	for _, t := range earlier {
		if !seen[t.ID()] {
			toks = append(toks, t)
		}
	}
	return errors.Join(s.announceAll(ctx, toks, now), err)
}

// revoke records the token revoked, ends the requests bound to it here
// (Bound) and tells the other servers (Notices), which end theirs. Those
// here end even when the store fails: the caller asked for the token to
// stop working, and may retry the rest, the notice included.
func (s *Service) revoke(ctx context.Context, tokenID string) error {
	if err := s.store.RevokeToken(ctx, tokenID, s.now()); err != nil {
		s.revocations.revoked(tokenID)
		return fmt.Errorf("auth: revoke token: %w", err)
	}
	return s.announce(ctx, tokenID)
}

// announceAll passes the sandbox tokens of toks, revoked at now, to announce:
// only those have requests bound to them, and only until they expire.
func (s *Service) announceAll(ctx context.Context, toks []user.Token, now time.Time) error {
	var errs []error
	for _, t := range toks {
		if t.Kind() == user.SandboxToken && now.Before(t.ExpiresAt()) {
			errs = append(errs, s.announce(ctx, t.ID()))
		}
	}
	return errors.Join(errs...)
}

// announce ends the requests bound here to a token the store has just
// recorded revoked and tells the other servers (Notices).
func (s *Service) announce(ctx context.Context, tokenID string) error {
	s.revocations.revoked(tokenID)
	if s.cfg.Notices != nil {
		if err := s.cfg.Notices.TokenRevoked(ctx, tokenID); err != nil {
			return fmt.Errorf("auth: announce revoked token: %w", err)
		}
	}
	return nil
}

// Bootstrap creates the org and its admin when missing, sets the password
// when one is given, and returns a new API token for the admin. Running it
// again is harmless.
func (s *Service) Bootstrap(ctx context.Context, orgName, email, password string) (Issued, bool, error) {
	now := s.now()
	created := false
	o, err := s.store.OrgByName(ctx, strings.TrimSpace(orgName))
	if fault.Is(err, fault.NotFound) {
		if o, err = org.New(id.New("org"), orgName, now); err != nil {
			return Issued{}, false, err
		}
		if err := s.store.CreateOrg(ctx, o); err != nil {
			return Issued{}, false, fmt.Errorf("auth: create org: %w", err)
		}
		created = true
	} else if err != nil {
		return Issued{}, false, err
	}
	u, err := s.store.UserByEmail(ctx, strings.ToLower(strings.TrimSpace(email)))
	newAdmin := fault.Is(err, fault.NotFound)
	switch {
	case newAdmin:
		if u, err = user.New(id.New("usr"), o.ID(), email, user.Admin, now); err != nil {
			return Issued{}, false, err
		}
	case err != nil:
		return Issued{}, false, err
	case u.OrgID() != o.ID():
		return Issued{}, false, fault.Errorf(fault.Conflict, "%s already belongs to another organization", u.Email())
	default:
		u = u.WithRole(user.Admin).WithDisabled(false)
	}
	if password != "" {
		h, err := HashPassword(password)
		if err != nil {
			return Issued{}, false, err
		}
		u = u.WithPasswordHash(h)
	}
	if newAdmin {
		if err := s.store.CreateUser(ctx, u); err != nil {
			return Issued{}, false, fmt.Errorf("auth: create admin: %w", err)
		}
		created = true
	} else if err := s.store.UpdateUser(ctx, u); err != nil {
		return Issued{}, false, err
	}
	iss, err := s.issue(ctx, u, user.APIToken, "bootstrap", "", s.cfg.APITokenTTL)
	return iss, created, err
}

// LogValue keeps tokens out of logs.
func (i Issued) LogValue() slog.Value { return slog.StringValue("token " + i.Record.ID()) }
