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
	if !errors.As(err, &refused) {
		t.Fatalf("the caller's filter: %v", err)
	}
	if _, err := r.proxy.Fetch(ctx, scope, policy(true, "pypi.test"), "ftp://pypi.test/", 100, nil); err == nil || errors.As(err, &refused) {
		t.Fatalf("an ftp URL: %v", err)
	}
	select {
	case rec := <-r.recs.ch:
		t.Fatalf("a fetch refused before any connection was recorded: %+v", rec)
	default:
	}
}
