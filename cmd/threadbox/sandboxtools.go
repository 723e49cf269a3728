package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"threadbox/app/auth"
	"threadbox/app/containers"
	"threadbox/app/sandboxtools"
	"threadbox/domain/user"
)

// sandboxWiring is the sandbox_v1 tools' part of the system: the bridge
// that serves the product's API inside sandboxes, the per-turn env and
// the executor.
type sandboxWiring struct {
	bridge *sandboxtools.Bridge
	env    *sandboxtools.TurnEnv
	exec   *sandboxtools.Executor

	mu    sync.Mutex
	serve func(net.Conn, string) // web.Server.ServeSandboxConn, once the server exists
}

// newSandboxWiring builds the bridge and executor over the containers.
func newSandboxWiring(cfg Config, ctrs *containers.Service, a *auth.Service, fs containerFiles, meter sandboxtools.Meter, log *slog.Logger) *sandboxWiring {
	w := &sandboxWiring{}
	w.bridge = sandboxtools.NewBridge(ctrs, w.serveConn, sandboxtools.BridgeConfig{
		APIPort: cfg.SandboxAPIPort, Services: cfg.SandboxServices, Logger: log.With("component", "bridge"),
	})
	ctrs.OnBoot(w.bridge.Boot)
	w.env = sandboxtools.NewTurnEnv(authTokens{a}, w.bridge, 0)
	w.exec = sandboxtools.New(ctrs, fs, sandboxtools.Config{MaxOutput: int(cfg.ToolMaxOutput), Log: log.With("component", "sandboxtools"), Meter: meter})
	return w
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

// authTokens adapts app/auth to sandboxtools.Tokens.
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
