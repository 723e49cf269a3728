// Package bridge makes the product's API, and the internal services an
// operator allows, reachable from inside sandboxes that have no network: a
// loopback listener inside each sandbox whose connections the host serves
// with the product's /api/gpt/ routes only (Bridge), and the variables
// every command of a turn gets to reach it with the turn's own token
// (TurnEnv).
package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// DefaultAPIPort is the loopback port inside every sandbox on which the
// product's API answers; services of SANDBOX_ALLOW_SERVICES take the ports
// after it, in the order listed.
const DefaultAPIPort = 47800

// APIPath is the path prefix of the product's API, the one the Anthropic
// SDKs take as their base URL.
const APIPath = "/api/gpt"

// Service is an internal service operators expose inside every sandbox
// (SANDBOX_ALLOW_SERVICES): connections to its loopback port inside the
// sandbox are carried to Addr, dialled from the threadbox host.
type Service struct {
	Name string // [a-z0-9_-]; the variable SANDBOX_SERVICE_<NAME> holds its address inside
	Addr string // host:port as seen from the threadbox host
}

var serviceName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// ParseServices parses SANDBOX_ALLOW_SERVICES: a comma-separated list of
// name=host:port.
func ParseServices(s string) ([]Service, error) {
	var out []Service
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "=")
		name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
		if !ok || !serviceName.MatchString(name) {
			return nil, fmt.Errorf("bridge: services: %q is not name=host:port", item)
		}
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return nil, fmt.Errorf("bridge: services: %q: the address must be host:port", item)
		}
		key := strings.ToUpper(name)
		if seen[key] {
			return nil, fmt.Errorf("bridge: services: %q is listed twice", name)
		}
		seen[key] = true
		out = append(out, Service{Name: name, Addr: addr})
	}
	return out, nil
}

// ServeFunc serves one connection made inside the container's sandbox to
// the product's API port (web.Server.ServeSandboxConn). It returns when
// the connection is done.
type ServeFunc func(conn net.Conn, containerID string)

// Config tunes a Bridge.
type Config struct {
	// APIPort is the product API's port inside the sandbox; 0 means
	// DefaultAPIPort.
	APIPort int
	// Services are further internal services to expose.
	Services []Service
	// Dial connects to a service from the host; nil means net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives bridge events; nil discards them.
	Logger *slog.Logger
	// MaxConns bounds the connections open at once from one sandbox (to the
	// API and the services together); a connection beyond it is closed at
	// once. 0 means DefaultMaxConns.
	MaxConns int
	// Egress, when set, serves connections to the egress proxy's port
	// inside the sandbox (infra/egressproxy.Proxy.Serve); the proxy has its
	// own bound on a sandbox's connections.
	Egress ServeFunc
	// EgressPort is the egress proxy's port inside the sandbox; 0 means
	// the port just below APIPort.
	EgressPort int
}

// NoProxy is NO_PROXY inside every sandbox: the bridge's own ports stay
// direct.
const NoProxy = "localhost,127.0.0.1,::1"

// DefaultMaxConns is the default bound on a sandbox's open bridge
// connections. With the agent protocol's flow-control window (256 KiB of
// unread bytes per connection at most) it bounds what one sandbox can make
// the host buffer to about 16 MiB, besides what the handlers hold.
const DefaultMaxConns = 64

// Bridge makes the product's API (and the allowed services) reachable from
// inside sandboxes that have no network: as a boot hook of the sandbox owner
// it asks each sandbox, once booted (or adopted), to listen on loopback and
// serves the connections it carries over. The listeners end with their
// sandbox; nothing else is reachable.
type Bridge struct {
	serve ServeFunc
	cfg   Config
	log   *slog.Logger
}

// Listener listens inside a container's running sandbox: the sandbox
// owner, which hands itself to its boot hooks (app/containers.Service).
type Listener interface {
	Listen(ctx context.Context, containerID, addr string) (net.Listener, error)
}

// New returns a Bridge serving API connections with serve.
func New(serve ServeFunc, cfg Config) *Bridge {
	if cfg.APIPort <= 0 {
		cfg.APIPort = DefaultAPIPort
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.EgressPort <= 0 {
		cfg.EgressPort = cfg.APIPort - 1
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Bridge{serve: serve, cfg: cfg, log: lg}
}

// BaseURL is ANTHROPIC_BASE_URL inside every sandbox.
func (b *Bridge) BaseURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(b.cfg.APIPort) + APIPath
}

// ProxyURL is the egress proxy's address inside every sandbox, "" when
// the bridge carries no egress.
func (b *Bridge) ProxyURL() string {
	if b.cfg.Egress == nil {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(b.cfg.EgressPort)
}

// ProxyEnv returns the variables that point common tools (curl, git, pip,
// npm, Python and Node libraries) at the egress proxy, in both the upper
// and lower case that different tools read; none when the bridge carries
// no egress. The proxy refuses everything while the org's egress is off.
func (b *Bridge) ProxyEnv() []string {
	u := b.ProxyURL()
	if u == "" {
		return nil
	}
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy", "npm_config_https_proxy"} {
		env = append(env, k+"="+u)
	}
	return append(env, "NO_PROXY="+NoProxy, "no_proxy="+NoProxy)
}

// Env returns the variables set for every command of a turn: the product
// API's address, the turn's token and model, each service's address and
// the egress proxy's.
func (b *Bridge) Env(token, model string) []string {
	env := []string{"ANTHROPIC_BASE_URL=" + b.BaseURL(), "ANTHROPIC_AUTH_TOKEN=" + token}
	if model != "" {
		env = append(env, "ANTHROPIC_MODEL="+model)
	}
	for i, s := range b.cfg.Services {
		key := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		env = append(env, "SANDBOX_SERVICE_"+key+"=127.0.0.1:"+strconv.Itoa(b.cfg.APIPort+1+i))
	}
	return append(env, b.ProxyEnv()...)
}

// Boot makes the listeners in the container's sandbox, just booted or
// adopted, through sb (a boot hook of app/containers). A backend that
// cannot forward gets none.
func (b *Bridge) Boot(ctx context.Context, sb Listener, containerID string) error {
	var listeners []net.Listener
	stop := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	listen := func(port int) (net.Listener, error) {
		l, err := sb.Listen(ctx, containerID, "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			stop()
			return nil, err
		}
		listeners = append(listeners, l)
		return l, nil
	}
	api, err := listen(b.cfg.APIPort)
	if errors.Is(err, sandbox.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bridge: bridge: %w", err)
	}
	for i := range b.cfg.Services {
		if _, err := listen(b.cfg.APIPort + 1 + i); err != nil {
			return fmt.Errorf("bridge: bridge: %w", err)
		}
	}
	var proxy net.Listener
	if b.cfg.Egress != nil {
		if proxy, err = listen(b.cfg.EgressPort); err != nil {
			return fmt.Errorf("bridge: egress proxy: %w", err)
		}
	}
	slots := make(chan struct{}, b.cfg.MaxConns) // shared by the sandbox's listeners
	go b.accept(containerID, api, slots, func(c net.Conn) { b.serve(c, containerID) })
	for i, s := range b.cfg.Services {
		go b.accept(containerID, listeners[1+i], slots, func(c net.Conn) { b.forward(c, s) })
	}
	if proxy != nil {
		// The proxy bounds a sandbox's connections itself (per sandbox,
		// refusing over the bound with an answer the tool can show).
		go b.accept(containerID, proxy, make(chan struct{}, 4*b.cfg.MaxConns), func(c net.Conn) { b.cfg.Egress(c, containerID) })
	}
	return nil
}

// accept hands each connection to handle until the listener ends with its
// sandbox, while the sandbox has a free slot; a connection beyond the
// sandbox's MaxConns is closed at once.
func (b *Bridge) accept(containerID string, l net.Listener, slots chan struct{}, handle func(net.Conn)) {
	refused := 0
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				b.log.Debug("bridge: accept", "err", err)
			}
			if refused > 0 {
				b.log.Warn("bridge: connections refused over the limit", "container", containerID, "refused", refused, "limit", cap(slots))
			}
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			if refused++; refused == 1 || refused%1000 == 0 {
				b.log.Warn("bridge: too many connections from a sandbox; refusing", "container", containerID, "limit", cap(slots), "refused", refused)
			}
			_ = c.Close()
			continue
		}
		go func() {
			defer func() { <-slots }()
			defer c.Close()
			handle(c)
		}()
	}
}

// forward pipes a connection to an allowed service.
func (b *Bridge) forward(c net.Conn, s Service) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := b.cfg.Dial(ctx, "tcp", s.Addr)
	cancel()
	if err != nil {
		b.log.Warn("bridge: service unreachable", "service", s.Name, "err", err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// Tokens issues and revokes the short-lived sandbox tokens of turns
// (app/auth.Service, adapted).
type Tokens interface {
	// IssueSandboxToken returns a token acting as p, accepted only on the
	// product's API and only from the container's sandbox, and its id.
	IssueSandboxToken(ctx context.Context, p user.Principal, containerID string, ttl time.Duration) (token, tokenID string, err error)
	// Revoke ends the token at once.
	Revoke(ctx context.Context, tokenID string) error
}

// Kept keeps, across a restart, the revocations of turns' tokens that were
// given up (infra/revocations: a folder in DATA_DIR), for the running
// server's next sweep or the next start to make (TurnEnv.RevokeKept).
type Kept interface {
	// Keep records that token id, which expires at expires, is still to
	// be revoked.
	Keep(id string, expires time.Time) error
	// Kept returns the ids of the tokens kept and their expiries.
	Kept() (map[string]time.Time, error)
	// Forget removes token id; one not kept is no error.
	Forget(id string) error
}

// DefaultTokenTTL bounds a turn's sandbox token even when its revocation
// at the turn's end is missed.
const DefaultTokenTTL = 30 * time.Minute

// RevokeRetryFor bounds how long a turn's token revocation is retried
// after a failure (the store briefly unreachable) before it is given up:
// kept for a later RevokeKept (TurnEnv.Keep), or else the token left to
// expire.
const RevokeRetryFor = 2 * time.Minute

// Backoff between revocation attempts: it starts at revokeBackoffMin and
// doubles up to revokeBackoffMax.
const (
	revokeBackoffMin = 200 * time.Millisecond
	revokeBackoffMax = 10 * time.Second
)

// TurnEnv gives each turn its sandbox variables.
type TurnEnv struct {
	tokens Tokens
	bridge *Bridge
	ttl    time.Duration
	// kept holds the revocations given up, for RevokeKept (nil: they
	// are only logged).
	kept Kept

	// retryFor, backoffMin and backoffMax pace the retries of a failed
	// revocation (RevokeRetryFor and the revokeBackoff constants).
	retryFor, backoffMin, backoffMax time.Duration

	mu       sync.Mutex
	retrying int           // revocations being retried
	idle     chan struct{} // closed when retrying drops to 0
	// revoking holds the ids of the tokens whose revocation is under way
	// (its first attempt or its retries): RevokeKept, called again while
	// they run, leaves them to it.
	revoking sync.Map
	// hurry is closed when Finish begins: retries pause no longer than
	// backoffMin. stop ends when Finish's time is up: retries give up.
	hurry      chan struct{}
	hurryOnce  sync.Once
	stop       context.Context
	giveUp     context.CancelFunc
	giveUpOnce sync.Once
}

// NewTurnEnv returns a TurnEnv issuing tokens valid for ttl (0 means
// DefaultTokenTTL).
func NewTurnEnv(tokens Tokens, bridge *Bridge, ttl time.Duration) *TurnEnv {
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	stop, giveUp := context.WithCancel(context.Background())
	return &TurnEnv{
		tokens: tokens, bridge: bridge, ttl: ttl,
		retryFor: RevokeRetryFor, backoffMin: revokeBackoffMin, backoffMax: revokeBackoffMax,
		hurry: make(chan struct{}), stop: stop, giveUp: giveUp,
	}
}

// Keep makes the revocations given up (the store unreachable for as long
// as they were retried, or until the server stopped) kept in k for the
// next sweep's or the next start's RevokeKept, instead of only logged.
// Call it before Begin.
func (t *TurnEnv) Keep(k Kept) { t.kept = k }

// RevokeKept revokes the kept tokens (Keep) that have not expired, kept
// by an earlier process, by this one or by another sharing the place they
// are kept, retrying each as at a turn's end, and forgets each once
// revoked; it forgets the expired ones at once. A token whose revocation
// is already under way here is left to it, so RevokeKept may be called
// again while an earlier call's retries run. A server calls it as it
// starts, when it listens to the database anew and at every sweep: the
// token of a turn that ended while the database was down does not stay
// usable long after the database is back. Once Finish has given up, the
// kept tokens are left for the next start.
func (t *TurnEnv) RevokeKept() error {
	if t.kept == nil || t.stop.Err() != nil {
		return nil
	}
	kept, err := t.kept.Kept()
	if err != nil {
		return fmt.Errorf("bridge: kept revocations: %w", err)
	}
	now := time.Now()
	for id, expires := range kept {
		if !now.Before(expires) {
			t.forget(id)
			continue
		}
		t.revoke(id, expires, true)
	}
	return nil
}

// forget removes token id from the kept revocations.
func (t *TurnEnv) forget(id string) {
	if err := t.kept.Forget(id); err != nil {
		t.bridge.log.Warn("bridge: a revoked token stays among the kept revocations; a later sweep or start revokes it again",
			"token", id, "err", err)
	}
}

// Finish is for a server stopping: the revocations being retried are
// retried at once, then after the shortest pause, and Finish returns once
// each has succeeded or been given up. A retry left running would end
// with the process and leave its token usable until it expires. When ctx
// ends first (the shutdown grace is over), those still failing are given
// up, each kept for the next start (Keep) or else logged as an error, and
// Finish returns once they have stopped; a revocation that fails after
// that is not retried.
func (t *TurnEnv) Finish(ctx context.Context) {
	t.hurryOnce.Do(func() { close(t.hurry) })
	for {
		t.mu.Lock()
		idle := t.idle
		t.mu.Unlock()
		if idle == nil {
			return
		}
		select {
		case <-idle:
		case <-ctx.Done():
			t.giveUpOnce.Do(t.giveUp)
			<-idle
		}
	}
}

// hurried reports whether Finish has begun.
func (t *TurnEnv) hurried() bool {
	select {
	case <-t.hurry:
		return true
	default:
		return false
	}
}

// revoke revokes token id. The first attempt runs before revoke returns;
// if it fails, the revocation is retried in the background with a growing
// pause until it succeeds or retryFor has passed, so that a token of a
// finished turn does not stay usable for the rest of its lifetime because
// of one store error (Finish hurries it). Every attempt runs on its own
// context: the turn's request is over by now. The token expires by
// expires; kept says it is among the kept revocations (Keep), to be
// forgotten once revoked.
// One already under way for id (revoking) is left to finish alone.
func (t *TurnEnv) revoke(id string, expires time.Time, kept bool) {
	if _, busy := t.revoking.LoadOrStore(id, true); busy {
		return
	}
	err := t.revokeOnce(id)
	if err == nil {
		if kept {
			t.forget(id)
		}
		t.revoking.Delete(id)
		return
	}
	t.bridge.log.Debug("bridge: revoking a turn's token failed; retrying", "token", id, "err", err)
	t.mu.Lock()
	if t.retrying == 0 {
		t.idle = make(chan struct{})
	}
	t.retrying++
	t.mu.Unlock()
	go func() {
		defer func() {
			t.revoking.Delete(id)
			t.mu.Lock()
			if t.retrying--; t.retrying == 0 {
				close(t.idle)
				t.idle = nil
			}
			t.mu.Unlock()
		}()
		deadline := time.Now().Add(t.retryFor)
		pause := t.backoffMin
		rushed := false // retried at once since Finish began
		for attempts := 2; ; attempts++ {
			hurry := t.hurry
			if t.hurried() {
				hurry = nil
				if pause = t.backoffMin; !rushed {
					pause, rushed = 0, true
				}
			}
			if time.Now().Add(pause).After(deadline) || t.stop.Err() != nil {
				t.gaveUp(id, expires, attempts-1, err)
				return
			}
			wait := time.NewTimer(pause)
			select {
			case <-wait.C:
			case <-hurry: // Finish began: retry now
				wait.Stop()
				rushed = true
			case <-t.stop.Done():
				wait.Stop()
				t.gaveUp(id, expires, attempts-1, err)
				return
			}
			if err = t.revokeOnce(id); err == nil {
				if kept {
					t.forget(id)
				}
				return
			}
			pause = min(2*pause, t.backoffMax)
		}
	}()
}

// gaveUp keeps the revocation of token id, which expires by expires, for
// the next sweep or start (Keep), with a warning; without a place to keep
// it, or when keeping fails, the token stays usable until it expires, and
// that is logged as an error.
func (t *TurnEnv) gaveUp(id string, expires time.Time, attempts int, err error) {
	if !time.Now().Before(expires) {
		t.bridge.log.Info("bridge: a turn's sandbox token expired before it could be revoked",
			"token", id, "attempts", attempts, "err", err)
		return
	}
	if t.kept == nil {
		t.bridge.log.Error("bridge: could not revoke a turn's sandbox token; it stays usable until it expires",
			"token", id, "expires", expires, "attempts", attempts, "err", err)
		return
	}
	if kerr := t.kept.Keep(id, expires); kerr != nil {
		t.bridge.log.Error("bridge: could not revoke a turn's sandbox token nor keep its revocation; it stays usable until it expires",
			"token", id, "expires", expires, "attempts", attempts, "err", err, "keep_err", kerr)
		return
	}
	t.bridge.log.Warn("bridge: could not revoke a turn's sandbox token; its revocation is kept for the next sweep or start",
		"token", id, "expires", expires, "attempts", attempts, "err", err)
}

// revokeOnce revokes the token id. A token whose record is gone counts as
// revoked: the sweep deletes the records of tokens that expired a while
// ago (a turn that outlived its token), and a token without a record is
// refused as a revoked one is.
func (t *TurnEnv) revokeOnce(id string) error {
	ctx, cancel := context.WithTimeout(t.stop, 10*time.Second)
	defer cancel()
	if err := t.tokens.Revoke(ctx, id); err != nil && !fault.Is(err, fault.NotFound) {
		return fmt.Errorf("bridge: revoke turn token: %w", err)
	}
	return nil
}

// Begin prepares the variables every command of p's turn in the container
// gets. env issues the turn's token on its first call (a turn that runs no
// command writes nothing) and returns the same variables on later ones; end
// revokes the token if it was issued, retrying in the background for a
// while if the first attempt fails (revoke). Call end when the turn is over.
func (t *TurnEnv) Begin(p user.Principal, containerID, model string) (env func(context.Context) ([]string, error), end func()) {
	var (
		mu      sync.Mutex
		vars    []string
		id      string
		expires time.Time
		closed  bool
	)
	env = func(ctx context.Context) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return nil, errors.New("bridge: turn is over")
		}
		if vars != nil {
			return vars, nil
		}
		tok, tid, err := t.tokens.IssueSandboxToken(ctx, p, containerID, t.ttl)
		if err != nil {
			return nil, fmt.Errorf("bridge: turn token: %w", err)
		}
		// Read after the token is issued: no earlier than its expiry.
		vars, id, expires = t.bridge.Env(tok, model), tid, time.Now().Add(t.ttl)
		return vars, nil
	}
	end = func() {
		mu.Lock()
		defer mu.Unlock()
		closed = true
		if id == "" {
			return
		}
		t.revoke(id, expires, false)
		id = ""
	}
	return env, end
}
