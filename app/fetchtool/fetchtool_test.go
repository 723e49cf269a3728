package fetchtool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/egress"
	"threadbox/domain/org"
)

func TestAllowed(t *testing.T) {
	cases := []struct {
		allowed, blocked []string
		host             string
		want             bool
	}{
		{nil, nil, "docs.example", true},
		{[]string{"example.com"}, nil, "example.com", true},
		{[]string{"example.com"}, nil, "docs.example.com", true},
		{[]string{"example.com"}, nil, "badexample.com", false},
		{[]string{"https://example.com/docs"}, nil, "example.com", true},
		{[]string{"example.com"}, nil, "other.org", false},
		{nil, []string{"evil.example"}, "evil.example", false},
		{nil, []string{"evil.example"}, "a.evil.example", false},
		{nil, []string{"Evil.EXAMPLE."}, "a.evil.example", false},
		{nil, []string{"[::ffff:192.0.2.1]"}, "192.0.2.1", false},
		{[]string{"::FFFF:192.0.2.1"}, nil, "192.0.2.1", true},
		{nil, []string{"evil.example"}, "good.example", true},
		{nil, []string{"2.3.4"}, "1.2.3.4", true},
		{[]string{"0.2.1"}, nil, "192.0.2.1", false},
		{[]string{"192.0.2.1"}, nil, "192.0.2.1", true},
		// The lists match hosts, on every port. A request whose entry
		// names a port is refused (wire.WebFetchTool.CheckDomains); one
		// that comes here anyway blocks its host and allows nothing.
		{nil, []string{"example.test:8443"}, "example.test", false},
		{nil, []string{"https://example.test:8443/docs"}, "a.example.test", false},
		{nil, []string{"192.0.2.1:80"}, "192.0.2.1", false},
		{nil, []string{"[2001:db8::1]:8443"}, "2001:db8::1", false},
		{nil, []string{"example.test:8443"}, "other.test", true},
		{[]string{"example.test:8443"}, nil, "example.test", false},
		{[]string{"[2001:db8::1]:8443"}, nil, "2001:db8::1", false},
		// An IPv6 address is no host and port, bracketed or not.
		{[]string{"2001:db8::1"}, nil, "2001:db8::1", true},
		{[]string{"[2001:DB8::1]"}, nil, "2001:db8::1", true},
		{nil, []string{"2001:db8::1"}, "2001:db8::1", false},
		// A name in another script is matched in its punycode form, the
		// form the fetch resolves and hands this filter.
		{nil, []string{"Bücher.example"}, "xn--bcher-kva.example", false},
		{nil, []string{"bücher.example"}, "www.xn--bcher-kva.example", false},
		{[]string{"bücher.example"}, nil, "xn--bcher-kva.example", true},
		// A wildcard is refused by the request's check; one that comes
		// here anyway blocks its domain and allows nothing.
		{nil, []string{"*.evil.example"}, "a.evil.example", false},
		{[]string{"*.good.example"}, nil, "a.good.example", false},
	}
	for _, c := range cases {
		if got := Allowed(wire.WebFetchTool{AllowedDomains: c.allowed, BlockedDomains: c.blocked}, c.host); got != c.want {
			t.Errorf("Allowed(%v, %v, %s) = %v", c.allowed, c.blocked, c.host, got)
		}
	}
}

func TestHTMLText(t *testing.T) {
	title, text := htmlText([]byte(`<html><head><title> The  Page </title><style>p{}</style><script>var x = 1;</script></head>
<body><h1>Heading</h1><p>First   para.</p><p>Second<br>line</p><noscript>no</noscript></body></html>`))
	if title != "The  Page" || text != "Heading\n\nFirst para.\n\nSecond\nline" {
		t.Fatalf("title %q text %q", title, text)
	}
}

type fetcher struct {
	got *egress.Fetched
	err error
}

func (f fetcher) Fetch(_ context.Context, _ egress.Scope, _ egress.Policy, _ string, _ int64, allow func(string) bool) (*egress.Fetched, error) {
	if !allow("docs.example") {
		return nil, &egress.Refused{Host: "docs.example"}
	}
	return f.got, f.err
}

type policies struct{}

func (policies) OrgPolicy(context.Context, string) (org.Policy, error) {
	return org.DefaultPolicy(), nil
}

func TestExecute(t *testing.T) {
	run := func(f fetcher, opts wire.WebFetchTool) map[string]any {
		t.Helper()
		r, err := New(f, policies{}, nil).Execute(context.Background(), messages.ToolCall{Name: wire.SubToolWebFetch, Input: json.RawMessage(`{"url":"https://docs.example/p"}`), WebFetch: &opts})
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		b, _ := json.Marshal(r)
		_ = json.Unmarshal(b, &v)
		return v
	}
	page := &egress.Fetched{Status: 200, ContentType: "text/html; charset=utf-8", URL: "https://docs.example/p", Body: []byte("<title>T</title><p>" + strings.Repeat("word ", 100) + "</p>")}
	v := run(fetcher{got: page}, wire.WebFetchTool{MaxContentTokens: 5})
	doc := v["content"].(map[string]any)
	if v["type"] != "web_fetch_result" || v["url"] != "https://docs.example/p" || doc["title"] != "T" || doc["source"].(map[string]any)["data"] != "word word word word" {
		t.Fatalf("result %v", v)
	}
	pdf := &egress.Fetched{Status: 200, ContentType: "application/pdf", Body: []byte("%PDF-1.4")}
	if v := run(fetcher{got: pdf}, wire.WebFetchTool{}); v["content"].(map[string]any)["source"].(map[string]any)["data"] != "JVBERi0xLjQ=" {
		t.Fatalf("pdf %v", v)
	}
	for name, c := range map[string]struct {
		f    fetcher
		opts wire.WebFetchTool
		code string
	}{
		"blocked by the tool":   {fetcher{got: page}, wire.WebFetchTool{BlockedDomains: []string{"docs.example"}}, wire.FetchURLNotAllowed},
		"refused by the policy": {fetcher{err: &egress.Refused{Host: "docs.example", Reason: "not listed"}}, wire.WebFetchTool{}, wire.FetchURLNotAllowed},
		"unreachable":           {fetcher{err: errors.New("connection refused")}, wire.WebFetchTool{}, wire.FetchURLNotAccessible},
		"not found":             {fetcher{got: &egress.Fetched{Status: 404, ContentType: "text/plain"}}, wire.WebFetchTool{}, wire.FetchURLNotAccessible},
		"binary":                {fetcher{got: &egress.Fetched{Status: 200, ContentType: "application/zip"}}, wire.WebFetchTool{}, wire.FetchUnsupportedContent},
	} {
		if v := run(c.f, c.opts); v["type"] != wire.ResultWebFetchError || v["error_code"] != c.code {
			t.Errorf("%s: %v", name, v)
		}
	}
}
