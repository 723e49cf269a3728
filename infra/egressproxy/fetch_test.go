package egressproxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"threadbox/domain/egress"
	"threadbox/infra/egressproxy"
)

// TestProxyFetch: a fetch threadbox makes for an org (the web_fetch tool)
// is decided and recorded like a sandbox's connection, a redirect's
// connection too.
func TestProxyFetch(t *testing.T) {
	pki := newTestPKI(t)
	var port string
	srv := pki.server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, "https://other.test:"+port+"/", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("page ", 100))
		}
	}), "pypi.test", "other.test")
	port = serverPort(t, srv)
	r := newRig(t, egressproxy.Config{UpstreamRoots: pki.pool}, port)
	scope := egress.Scope{OrgID: "org_1", UserID: "usr_1", ContainerID: "cnt_1"}
	policy := func(on bool, allow ...string) egress.Policy {
		pats, _ := egress.ParsePatterns(allow)
		return egress.Policy{On: on, Allow: pats}
	}
	ctx := context.Background()

	f, err := r.proxy.Fetch(ctx, scope, policy(true, "pypi.test"), "https://pypi.test:"+port+"/page", 100, nil)
	if err != nil || f.Status != 200 || len(f.Body) != 100 || !f.Truncated || f.ContentType != "text/plain" {
		t.Fatalf("fetch: %+v %v", f, err)
	}
	if rec := r.recs.next(t); !rec.Allowed || rec.Host != "pypi.test" || rec.Rule != "pypi.test" || rec.OrgID != "org_1" || rec.UserID != "usr_1" || rec.BytesDown == 0 {
		t.Fatalf("record %+v", rec)
	}

	_, err = r.proxy.Fetch(ctx, scope, policy(true, "pypi.test"), "https://pypi.test:"+port+"/away", 100, nil)
	var refused *egress.Refused
	if !errors.As(err, &refused) || refused.Host != "other.test" || refused.Rule != egress.RuleNoMatch {
		t.Fatalf("a redirect to a host not listed: %v", err)
	}
	// The first hop is recorded when its connection closes, which may be
	// after the redirect's refusal.
	hops := map[string]egress.Record{}
	for range 2 {
		rec := r.recs.next(t)
		hops[rec.Host] = rec
	}
	if rec := hops["pypi.test"]; !rec.Allowed {
		t.Fatalf("first hop %+v", rec)
	}
	if rec := hops["other.test"]; rec.Allowed || rec.Rule != egress.RuleNoMatch {
		t.Fatalf("redirect hop %+v", rec)
	}

	// The host is recorded, resolved and decided as the proxy writes it,
	// whatever form the URL gave it.
	if _, err := r.proxy.Fetch(ctx, scope, policy(true, "pypi.test"), "https://PyPI.test.:"+port+"/page", 100, nil); err != nil {
		t.Fatalf("a host with a trailing dot: %v", err)
	}
	if rec := r.recs.next(t); !rec.Allowed || rec.Host != "pypi.test" {
		t.Fatalf("record %+v", rec)
	}
	// The certificate names no address: the fetch fails after the
	// connection was made, and recorded.
	r.proxy.Fetch(ctx, scope, policy(true, "127.0.0.1"), "https://[::ffff:127.0.0.1]:"+port+"/", 100, nil)
	if rec := r.recs.next(t); !rec.Allowed || rec.Host != "127.0.0.1" || rec.Address != "127.0.0.1" {
		t.Fatalf("record %+v", rec)
	}

	_, err = r.proxy.Fetch(ctx, scope, policy(false, "pypi.test"), "https://pypi.test:"+port+"/", 100, nil)
	if !errors.As(err, &refused) || refused.Rule != egress.RuleOff {
		t.Fatalf("egress off: %v", err)
	}
	if rec := r.recs.next(t); rec.Allowed || rec.Rule != egress.RuleOff {
		t.Fatalf("record %+v", rec)
	}

	_, err = r.proxy.Fetch(ctx, scope, policy(true, "pypi.test"), "https://pypi.test:"+port+"/", 100, func(string) bool { return false })
	if !errors.As(err, &refused) || refused.Rule != "" {
		t.Fatalf("the caller's filter: %v", err)
	}
	if _, err := r.proxy.Fetch(ctx, scope, policy(true, "pypi.test"), "ftp://pypi.test/", 100, nil); err == nil || errors.As(err, &refused) {
		t.Fatalf("an ftp URL: %v", err)
	}
	select {
	case rec := <-r.recs.ch:
		t.Fatalf("a fetch refused before any connection (the caller's filter, an ftp URL) was recorded: %+v", rec)
	default:
	}
}

// TestProxyFetchFilterSeesNormalHost: the caller's filter is given a
// URL's host, and a redirect's, as the ledger writes it, so a host spelt
// with capitals, a trailing dot or as an IPv4-mapped address is refused
// by a filter that names it plainly, and a name in another script in the
// punycode form it is dialled in.
func TestProxyFetchFilterSeesNormalHost(t *testing.T) {
	pki := newTestPKI(t)
	var port string
	srv := pki.server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "https://OTHER.test.:"+port+"/", http.StatusFound)
			return
		}
		io.WriteString(w, "page")
	}), "pypi.test", "other.test")
	port = serverPort(t, srv)
	r := newRig(t, egressproxy.Config{UpstreamRoots: pki.pool}, port)
	pats, _ := egress.ParsePatterns([]string{"pypi.test", "other.test", "127.0.0.1"})
	pol := egress.Policy{On: true, Allow: pats}
	scope := egress.Scope{OrgID: "org_1", UserID: "usr_1", ContainerID: "cnt_1"}
	ctx := context.Background()
	var seen []string
	block := func(blocked string) func(string) bool {
		return func(host string) bool {
			seen = append(seen, host)
			return host != blocked
		}
	}

	for _, c := range []struct{ url, blocked string }{
		{"https://PyPI.TEST.:" + port + "/", "pypi.test"},
		{"https://[::ffff:127.0.0.1]:" + port + "/", "127.0.0.1"},
		{"https://Bücher.test:" + port + "/", "xn--bcher-kva.test"}, // as net/http dials it
	} {
		seen = nil
		_, err := r.proxy.Fetch(ctx, scope, pol, c.url, 100, block(c.blocked))
		var refused *egress.Refused
		if !errors.As(err, &refused) || refused.Host != c.blocked || len(seen) != 1 || seen[0] != c.blocked {
			t.Fatalf("%s with %s blocked: %v; the filter saw %q", c.url, c.blocked, err, seen)
		}
	}

	seen = nil
	_, err := r.proxy.Fetch(ctx, scope, pol, "https://pypi.test:"+port+"/away", 100, block("other.test"))
	var refused *egress.Refused
	if !errors.As(err, &refused) || refused.Host != "other.test" || len(seen) != 2 || seen[1] != "other.test" {
		t.Fatalf("a redirect to a blocked host: %v; the filter saw %q", err, seen)
	}
	if rec := r.recs.next(t); rec.Host != "pypi.test" || !rec.Allowed {
		t.Fatalf("first hop %+v", rec)
	}
	select {
	case rec := <-r.recs.ch:
		t.Fatalf("a host the filter refused was recorded: %+v", rec)
	default:
	}
}
