package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"threadbox/app/egressgate"
	"threadbox/app/fetchtool"
	"threadbox/app/messages"
	"threadbox/app/tools"
	"threadbox/domain/egress"
	"threadbox/infra/egressproxy"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/seal"
)

// EgressConfig is the operator's side of controlled egress: the ceiling
// over every org's allowlist and the proxy's per-sandbox limits.
type EgressConfig struct {
	// Ceiling holds EGRESS_DENY (host patterns, addresses and prefixes no
	// org may reach) and EGRESS_ALLOW_PRIVATE (non-public addresses,
	// prefixes or host patterns that may be reached).
	Ceiling egress.Ceiling
	// MaxConns is EGRESS_MAX_CONNS: a sandbox's connections through the
	// proxy at once.
	MaxConns int
	// BytesPerSecond is EGRESS_BYTES_PER_SECOND: a sandbox's bandwidth
	// through the proxy, each way; 0 is unbounded.
	BytesPerSecond int64
	// ResponseTimeout is EGRESS_RESPONSE_TIMEOUT: how long a forwarded
	// request waits for the header of the host's answer (504 past it).
	ResponseTimeout time.Duration
	// TunnelIdle is EGRESS_TUNNEL_IDLE: how long a tunnel may carry no
	// byte either way before it is closed.
	TunnelIdle time.Duration
	// Resolver is EGRESS_RESOLVER: the DNS server (host:port) the proxy
	// asks; "" is the system's.
	Resolver string
	// Off is EGRESS_PROXY=off: no proxy inside sandboxes at all.
	Off bool
	// SecretKey is EGRESS_SECRET_KEY: the 32-byte key (64 hex digits or
	// base64) that seals org secrets at rest; nil means the key file
	// DATA_DIR/egress-secret.key, generated on first start.
	SecretKey []byte
	// UpstreamRoots is EGRESS_UPSTREAM_ROOTS: a PEM file of roots the
	// proxy trusts, besides the system's, for hosts whose TLS it
	// terminates to add a secret.
	UpstreamRoots string
}

// loadEgressConfig reads EGRESS_*.
func loadEgressConfig(getenv func(string) string) (EgressConfig, error) {
	var c EgressConfig
	list := func(name string) []string {
		var out []string
		for s := range strings.SplitSeq(getenv(name), ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	var err error
	if c.Ceiling, err = egress.NewCeiling(list("EGRESS_DENY"), nil); err != nil {
		return c, &configError{"EGRESS_DENY", err.Error()}
	}
	if c.Ceiling, err = egress.NewCeiling(list("EGRESS_DENY"), list("EGRESS_ALLOW_PRIVATE")); err != nil {
		return c, &configError{"EGRESS_ALLOW_PRIVATE", err.Error()}
	}
	num := func(name string, def int64) (int64, error) {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, &configError{name, "must be a whole number, 0 or more"}
		}
		return n, nil
	}
	mc, err := num("EGRESS_MAX_CONNS", egressproxy.DefaultMaxConns)
	if err != nil {
		return c, err
	}
	c.MaxConns = int(min(mc, 1<<16))
	if c.BytesPerSecond, err = num("EGRESS_BYTES_PER_SECOND", 0); err != nil {
		return c, err
	}
	wait := func(name string, def time.Duration) (time.Duration, error) {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, &configError{name, "must be a duration above zero, such as 90s or 30m"}
		}
		return d, nil
	}
	if c.ResponseTimeout, err = wait("EGRESS_RESPONSE_TIMEOUT", egressproxy.DefaultResponseHeaderTimeout); err != nil {
		return c, err
	}
	if c.TunnelIdle, err = wait("EGRESS_TUNNEL_IDLE", egressproxy.DefaultTunnelIdleTimeout); err != nil {
		return c, err
	}
	if r := strings.TrimSpace(getenv("EGRESS_RESOLVER")); r != "" {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return c, &configError{"EGRESS_RESOLVER", "must be host:port of a DNS server"}
		}
		c.Resolver = r
	}
	if k := strings.TrimSpace(getenv("EGRESS_SECRET_KEY")); k != "" {
		if c.SecretKey, err = seal.ParseKey(k); err != nil {
			return c, &configError{"EGRESS_SECRET_KEY", "must be 32 bytes as 64 hex digits or base64"}
		}
	}
	c.UpstreamRoots = strings.TrimSpace(getenv("EGRESS_UPSTREAM_ROOTS"))
	switch strings.TrimSpace(getenv("EGRESS_PROXY")) {
	case "", "on":
	case "off":
		c.Off = true
	default:
		return c, &configError{"EGRESS_PROXY", "must be on or off"}
	}
	return c, nil
}

// resolver returns the resolver the proxy asks: the system's, or the DNS
// server EGRESS_RESOLVER names.
func (c EgressConfig) resolver() *net.Resolver {
	if c.Resolver == "" {
		return net.DefaultResolver
	}
	addr := c.Resolver
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// egressWiring is the egress proxy with the gate and the log it reports to.
type egressWiring struct {
	proxy *egressproxy.Proxy
	log   *egressgate.Log
}

// egressInstall is what the egress proxy keeps for the whole install: the
// box that seals org secrets, and the CA with which the proxy terminates
// TLS for hosts bound to a secret, which every sandbox trusts through the
// trust folder.
type egressInstall struct {
	box      *seal.Box
	ca       *egressproxy.CA // nil when the proxy is off
	roots    *x509.CertPool  // the upstream roots; nil is the system's
	trustDir string          // "" when the proxy is off
}

// egressSecretKeyFile, egressCAFile and egressTrustDir are where the
// install's egress material is kept in DATA_DIR: the sealing key and the
// CA's key (both 0600, never mounted anywhere), and the folder every
// sandbox sees read-only (the CA's certificate and a bundle with it).
func egressSecretKeyFile(dataDir string) string { return filepath.Join(dataDir, "egress-secret.key") }
func egressCAFile(dataDir string) string        { return filepath.Join(dataDir, "egress-ca.pem") }

// egressTrustDir is the trust folder in DATA_DIR; "" when the proxy is off.
func egressTrustDir(cfg Config) string {
	if cfg.Egress.Off {
		return ""
	}
	return filepath.Join(cfg.DataDir, "egress-trust")
}

// newEgressInstall loads (or makes, on first start) the sealing key and
// the CA, and writes the trust folder before any sandbox boots.
func newEgressInstall(cfg Config, lg *slog.Logger) (*egressInstall, error) {
	key := cfg.Egress.SecretKey
	if key == nil {
		k, created, err := seal.LoadOrCreateKey(egressSecretKeyFile(cfg.DataDir))
		if err != nil {
			return nil, err
		}
		if created {
			lg.Info("egress: secret key generated", "file", egressSecretKeyFile(cfg.DataDir))
		}
		key = k
	}
	box, err := seal.New(key)
	if err != nil {
		return nil, err
	}
	in := &egressInstall{box: box, trustDir: egressTrustDir(cfg)}
	if cfg.Egress.Off {
		return in, nil
	}
	if in.ca, err = egressproxy.LoadOrCreateCA(egressCAFile(cfg.DataDir)); err != nil {
		return nil, err
	}
	if err := egressproxy.WriteTrust(in.trustDir, in.ca); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(in.trustDir, ".curlrc"), []byte(boxes.TrustCurlrc), 0o644); err != nil {
		return nil, fmt.Errorf("egress: trust folder: %w", err)
	}
	if cfg.Egress.UpstreamRoots != "" {
		b, err := os.ReadFile(cfg.Egress.UpstreamRoots)
		if err != nil {
			return nil, &configError{"EGRESS_UPSTREAM_ROOTS", err.Error()}
		}
		if in.roots, err = x509.SystemCertPool(); err != nil {
			in.roots = x509.NewCertPool()
		}
		if !in.roots.AppendCertsFromPEM(b) {
			return nil, &configError{"EGRESS_UPSTREAM_ROOTS", "holds no PEM certificate"}
		}
	}
	return in, nil
}

// newEgress builds the proxy; nil when the operator turned it off.
func newEgress(cfg EgressConfig, in *egressInstall, gate *egressgate.Gate, ledger egress.Ledger, counter egressgate.Counter, lg *slog.Logger) *egressWiring {
	if cfg.Off {
		return nil
	}
	l := egressgate.NewLog(ledger, counter, lg.With("component", "egress"))
	p := egressproxy.New(gate, l, egressproxy.Config{
		Ceiling: cfg.Ceiling, Resolver: cfg.resolver(), MaxConns: cfg.MaxConns, BytesPerSecond: cfg.BytesPerSecond,
		ResponseHeaderTimeout: cfg.ResponseTimeout, TunnelIdleTimeout: cfg.TunnelIdle,
		Logger: lg.With("component", "egress"), CA: in.ca, UpstreamRoots: in.roots,
	})
	return &egressWiring{proxy: p, log: l}
}

// Close stops the proxy and writes the ledger's last records.
func (e *egressWiring) Close() error {
	if e == nil {
		return nil
	}
	err := e.proxy.Close()
	e.log.Close()
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	return nil
}

// egressNotes is the log's refusals for tool results; nil without a proxy.
func egressNotes(e *egressWiring) tools.EgressNotes {
	if e == nil {
		return nil
	}
	return e.log
}

// webFetchTool is the web_fetch tool's executor, fetching through the
// egress proxy's decisions and ledger; nil (each call answered
// "unavailable") when the operator turned the proxy off.
func webFetchTool(sys *system, log *slog.Logger) messages.ToolExecutor {
	if sys.egress == nil {
		return nil
	}
	return fetchtool.New(sys.egress.proxy, sys.admin, log.With("component", "web_fetch"))
}
