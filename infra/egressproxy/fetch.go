package egressproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"threadbox/domain/egress"
)

// Bounds of a fetch.
const (
	fetchTimeout   = 30 * time.Second
	fetchRedirects = 5
)

// Fetch GETs rawURL on behalf of scope under the org's policy pol,
// through the same decisions as a sandbox's connections (the policy, the
// operator's ceiling, names resolved here and every address checked) and
// into the same ledger: every connection, each redirect's included, is
// one record. allow, when set, must accept each host (a redirect's too),
// which it is given as egress.NormalizeHost writes it.
// At most limit bytes of the body are read. A connection the policy
// refuses is an error wrapping *egress.Refused, and so is a host allow
// refuses, with no rule and no record: allow is the caller's own limit,
// not the org's policy, and it refuses before any connection is asked
// for. No org secret is added.
func (p *Proxy) Fetch(ctx context.Context, scope egress.Scope, pol egress.Policy, rawURL string, limit int64, allow func(host string) bool) (*egress.Fetched, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return p.fetchDial(ctx, scope, pol, addr)
		},
		TLSClientConfig:       &tls.Config{RootCAs: p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   DefaultDialTimeout,
		ResponseHeaderTimeout: fetchTimeout,
		DisableKeepAlives:     true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: fetchTimeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= fetchRedirects {
			return fmt.Errorf("more than %d redirects", fetchRedirects)
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return fmt.Errorf("a redirect to %s://", req.URL.Scheme)
		}
		if host, ok := filter(req.URL.Hostname(), allow); !ok {
			return &egress.Refused{Host: host, Reason: "a redirect to " + host + ", which the tool does not allow"}
		}
		return nil
	}}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("egressproxy: fetch: %q is not an http(s) URL", rawURL)
	}
	if host, ok := filter(u.Hostname(), allow); !ok {
		return nil, &egress.Refused{Host: host, Reason: host + " is not allowed by the tool"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: fetch: %w", err)
	}
	req.Header.Set("User-Agent", "threadbox-web-fetch/1")
	req.Header.Set("Accept", "text/html,text/plain,application/pdf,application/json;q=0.9,*/*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: fetch: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("egressproxy: fetch: %w", err)
	}
	f := &egress.Fetched{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}
	if int64(len(body)) > limit {
		f.Body, f.Truncated = body[:limit], true
	}
	return f, nil
}

// filter reports whether allow (when set) accepts a URL's host, which it
// is given as the connection's record will write it: the name the client
// dials (an internationalized name in its punycode form, as net/http
// dials it) through egress.NormalizeHost. A host that does not normalize
// is refused, so no form of a host reaches the dial unfiltered. host is
// the normalized host, or the raw one when it does not normalize.
func filter(raw string, allow func(host string) bool) (host string, ok bool) {
	if allow == nil {
		return raw, true
	}
	host = raw
	if !isASCII(host) {
		a, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return raw, false
		}
		host = a
	}
	host, ok = egress.NormalizeHost(host)
	if !ok {
		return raw, false
	}
	return host, allow(host)
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// fetchDial makes one connection of a fetch: decided, dialled and
// recorded as a sandbox's would be, its host written as
// egress.NormalizeHost writes it (a host that is neither a name nor an
// address is refused as bad-request, with no host in the ledger).
func (p *Proxy) fetchDial(ctx context.Context, scope egress.Scope, pol egress.Policy, addr string) (net.Conn, error) {
	start := time.Now()
	raw, portStr, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		return nil, fmt.Errorf("egressproxy: fetch: %q is not host:port", addr)
	}
	rec := egress.Record{OrgID: scope.OrgID, UserID: scope.UserID, ThreadID: scope.ThreadID, ContainerID: scope.ContainerID,
		Port: port, At: start.UTC()}
	host, ok := egress.NormalizeHost(raw)
	if !ok {
		rec.Rule, rec.Reason = RuleBadRequest, fmt.Sprintf("%.64q is not a host name or an IP address", raw)
		p.rec.Record(rec)
		return nil, &egress.Refused{Port: port, Rule: rec.Rule, Reason: rec.Reason}
	}
	rec.Host = host
	addrs, allowed := p.check(ctx, pol, &rec)
	if !allowed {
		p.rec.Record(rec)
		return nil, &egress.Refused{Host: host, Port: port, Rule: rec.Rule, Reason: rec.Reason}
	}
	c, a, err := p.dial(ctx, addrs, port)
	if err != nil {
		rec.Allowed, rec.Reason, rec.Duration = true, "unreachable: "+err.Error(), time.Since(start)
		p.rec.Record(rec)
		return nil, err
	}
	rec.Allowed, rec.Address = true, a.String()
	return &recordedConn{countingConn: &countingConn{Conn: c}, p: p, rec: rec, start: start}, nil
}

// recordedConn is a fetch's connection, recorded with its bytes when it
// is closed.
type recordedConn struct {
	*countingConn
	p     *Proxy
	rec   egress.Record
	start time.Time
	once  sync.Once
}

func (c *recordedConn) Close() error {
	err := c.countingConn.Close()
	c.once.Do(func() {
		c.rec.BytesUp, c.rec.BytesDown = c.sent.Load(), c.received.Load()
		c.rec.Duration = time.Since(c.start)
		c.p.rec.Record(c.rec)
	})
	return err
}
