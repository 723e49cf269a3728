package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"threadbox/app/egressgate"
	"threadbox/app/tools"
	"threadbox/domain/egress"
	"threadbox/infra/egressproxy"
)

// EgressConfig is the operator's side of controlled egress: the ceiling
// over every org's allowlist and the proxy's per-sandbox limits.
type EgressConfig struct {
	// Ceiling holds EGRESS_DENY (host patterns no org may reach) and
	// EGRESS_ALLOW_PRIVATE (non-public addresses, prefixes or host patterns
	// that may be reached).
	Ceiling egress.Ceiling
	// MaxConns is EGRESS_MAX_CONNS: a sandbox's connections through the
	// proxy at once.
	MaxConns int
	// BytesPerSecond is EGRESS_BYTES_PER_SECOND: a sandbox's bandwidth
	// through the proxy, each way; 0 is unbounded.
	BytesPerSecond int64
	// Resolver is EGRESS_RESOLVER: the DNS server (host:port) the proxy
	// asks; "" is the system's.
	Resolver string
	// Off is EGRESS_PROXY=off: no proxy inside sandboxes at all.
	Off bool
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
	if r := strings.TrimSpace(getenv("EGRESS_RESOLVER")); r != "" {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return c, &configError{"EGRESS_RESOLVER", "must be host:port of a DNS server"}
		}
		c.Resolver = r
	}
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

// newEgress builds the proxy; nil when the operator turned it off.
func newEgress(cfg EgressConfig, gate *egressgate.Gate, ledger egress.Ledger, counter egressgate.Counter, lg *slog.Logger) *egressWiring {
	if cfg.Off {
		return nil
	}
	l := egressgate.NewLog(ledger, counter, lg.With("component", "egress"))
	p := egressproxy.New(gate, l, egressproxy.Config{
		Ceiling: cfg.Ceiling, Resolver: cfg.resolver(), MaxConns: cfg.MaxConns, BytesPerSecond: cfg.BytesPerSecond,
		Logger: lg.With("component", "egress"),
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
