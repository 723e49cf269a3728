package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"threadbox/app/auth"
	"threadbox/app/bridge"
	"threadbox/app/containers"
	"threadbox/domain/user"
	"threadbox/infra/revocations"
)

// sandboxWiring is the way from inside sandboxes back to the product: the
// bridge that serves the product's API inside them and the per-turn env.
type sandboxWiring struct {
	bridge *bridge.Bridge
	env    *bridge.TurnEnv

	mu    sync.Mutex
	serve func(net.Conn, string) // web.Server.ServeSandboxConn, once the server exists
}

// newSandboxWiring builds the bridge; its boot hook (bootHook) listens in
// each sandbox the owner boots or adopts.
func newSandboxWiring(cfg Config, a *auth.Service, eg *egressWiring, log *slog.Logger) *sandboxWiring {
	w := &sandboxWiring{}
	bc := bridge.Config{APIPort: cfg.SandboxAPIPort, Services: cfg.SandboxServices, Logger: log.With("component", "bridge")}
	if eg != nil {
		bc.Egress = eg.proxy.Serve
	}
	w.bridge = bridge.New(w.serveConn, bc)
	w.env = bridge.NewTurnEnv(authTokens{a}, w.bridge, 0)
	// A revocation given up (the database down until the process stopped)
	// is kept in DATA_DIR for the next start to make.
	w.env.Keep(revocations.New(filepath.Join(cfg.DataDir, "revocations")))
	return w
}

// bootHook is the bridge as the sandbox owner's boot hook.
func (w *sandboxWiring) bootHook(ctx context.Context, sb containers.Listener, containerID string) error {
	return w.bridge.Boot(ctx, sb, containerID)
}

// setServe names the handler of connections from inside sandboxes.
func (w *sandboxWiring) setServe(f func(net.Conn, string)) {
	w.mu.Lock()
	w.serve = f
	w.mu.Unlock()
}

func (w *sandboxWiring) serveConn(c net.Conn, containerID string) {
	w.mu.Lock()
	f := w.serve
	w.mu.Unlock()
	if f == nil {
		_ = c.Close()
		return
	}
	f(c, containerID)
}

// authTokens adapts app/auth to bridge.Tokens.
type authTokens struct{ a *auth.Service }

func (t authTokens) IssueSandboxToken(ctx context.Context, p user.Principal, containerID string, ttl time.Duration) (string, string, error) {
	iss, err := t.a.CreateSandboxToken(ctx, p, containerID, ttl)
	if err != nil {
		return "", "", fmt.Errorf("sandbox token: %w", err)
	}
	return iss.Token, iss.Record.ID(), nil
}

func (t authTokens) Revoke(ctx context.Context, tokenID string) error {
	return t.a.Revoke(ctx, tokenID)
}
