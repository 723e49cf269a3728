package web

import (
	"mime"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
	"threadbox/domain/user"
)

const principalKey = "threadbox.principal"

// bearerToken returns the token of an Authorization header of the Bearer
// scheme, whose name HTTP compares without regard to case ("bearer" and
// "BEARER" are Bearer too), and whether the header is of that scheme.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// authenticate requires a valid bearer token and stores the principal for
// the handler. Sandbox tokens only reach the Messages API.
func (s *Server) authenticate(c *fiber.Ctx) error {
	token, ok := bearerToken(c.Get(fiber.HeaderAuthorization))
	if !ok {
		if xk := c.Get("X-Api-Key"); xk != "" {
			token, ok = xk, true
		}
	}
	if !ok || strings.TrimSpace(token) == "" {
		return fault.New(fault.Unauthenticated, "missing bearer token: send Authorization: Bearer <token>")
	}
	p, err := s.svc.Auth.Authenticate(c.UserContext(), strings.TrimSpace(token))
	if err != nil {
		return err
	}
	// A sandbox token is valid only on its sandbox's connection, and only
	// for /api/gpt/: checked here on the path Fiber routes by, as well as
	// by the connection's filter on fasthttp's normalised one.
	if p.Kind == user.SandboxToken && !strings.HasPrefix(c.Path(), "/api/gpt/") {
		return fault.New(fault.Forbidden, "sandbox tokens may only call the Messages API")
	}
	if err := checkSandboxConn(c, p); err != nil {
		return err
	}
	c.Locals(principalKey, p)
	return c.Next()
}

// principal returns the caller set by authenticate.
func principal(c *fiber.Ctx) user.Principal {
	p, _ := c.Locals(principalKey).(user.Principal)
	return p
}

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	// RefreshCookie asks for a browser session (web/session.go): a
	// refresh cookie and a short-lived access token.
	RefreshCookie bool `json:"refresh_cookie"`
}

type tokenResponse struct {
	Token     string    `json:"token"`
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at"`
	// SessionExpiresAt is when a browser session ends (its refresh cookie's
	// expiry); absent for a plain session token.
	SessionExpiresAt *time.Time `json:"session_expires_at,omitempty"`
}

// maxLoginBody caps a login request's body: an email and a password of at
// most 72 bytes fit many times over.
const maxLoginBody = 4 << 10

// login exchanges an email and password for a session token. It takes only
// application/json, a type an HTML form of another site cannot send
// without a CORS preflight this server never grants, so other sites cannot
// make visitors' browsers log in (or spend the login throttle) for them.
func (s *Server) login(c *fiber.Ctx) error {
	if mt, _, _ := mime.ParseMediaType(c.Get(fiber.HeaderContentType)); mt != fiber.MIMEApplicationJSON {
		return fiber.NewError(fiber.StatusUnsupportedMediaType, "login requires Content-Type: application/json")
	}
	var req loginRequest
	if err := parseJSONLimit(c, &req, maxLoginBody); err != nil {
		return err
	}
	if req.RefreshCookie {
		bs, err := s.svc.Auth.LoginBrowser(c.UserContext(), req.Email, req.Password, s.clientAddr(c))
		if err != nil {
			return err
		}
		s.setRefreshCookie(c, bs.Refresh, bs.Record.ExpiresAt())
		return c.JSON(sessionResponse(bs))
	}
	iss, err := s.svc.Auth.Login(c.UserContext(), req.Email, req.Password, s.clientAddr(c))
	if err != nil {
		return err
	}
	return c.JSON(tokenResponse{Token: iss.Token, ID: iss.Record.ID(), ExpiresAt: iss.Record.ExpiresAt()})
}

type meResponse struct {
	UserID string `json:"user_id"`
	OrgID  string `json:"org_id"`
	Role   string `json:"role"`
	Email  string `json:"email,omitempty"`
}

func (s *Server) me(c *fiber.Ctx) error {
	p := principal(c)
	u, err := s.svc.Auth.Me(c.UserContext(), p)
	if err != nil {
		return err
	}
	return c.JSON(meResponse{UserID: p.UserID, OrgID: p.OrgID, Role: string(p.Role), Email: u.Email()})
}

type tokenView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

func viewToken(t user.Token) tokenView {
	return tokenView{ID: t.ID(), Name: t.Name(), CreatedAt: t.CreatedAt(), ExpiresAt: t.ExpiresAt(), RevokedAt: t.RevokedAt(), LastUsedAt: t.LastUsedAt()}
}

type createTokenRequest struct {
	Name string `json:"name"`
	TTL  string `json:"ttl"` // a Go duration such as "720h"; empty means the default
}

func (s *Server) createToken(c *fiber.Ctx, req createTokenRequest) error {
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			return fault.New(fault.Invalid, "ttl must be a duration such as 720h")
		}
		ttl = d
	}
	iss, err := s.svc.Auth.CreateAPIToken(c.UserContext(), principal(c), req.Name, ttl)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(struct {
		tokenView
		Token string `json:"token"`
	}{viewToken(iss.Record), iss.Token})
}

func (s *Server) listTokens(c *fiber.Ctx) error {
	ts, err := s.svc.Auth.Tokens(c.UserContext(), principal(c).UserID)
	return answerList(c, ts, err, viewToken)
}
