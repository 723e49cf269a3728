package messages

import (
	"encoding/json"
	"strings"
	"testing"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

func TestPlanWebFetch(t *testing.T) {
	req := func(tools ...string) *wire.Request {
		var r wire.Request
		body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[` + strings.Join(tools, ",") + `]}`
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	p, err := plan(req(`{"type":"web_fetch_20260209","name":"web_fetch","max_uses":3,"allowed_domains":["example.com"],"max_content_tokens":100}`), nil)
	if err != nil || p.WebFetch == nil || p.WebFetch.MaxUses != 3 || p.WebFetch.MaxContentTokens != 100 || len(p.ServerTools) != 1 || p.ServerTools[0] != "web_fetch" {
		t.Fatalf("plan %+v, %v", p, err)
	}
	for name, tools := range map[string][]string{
		"another name":                  {`{"type":"web_fetch_20250910","name":"fetch"}`},
		"twice":                         {`{"type":"web_fetch_20250910","name":"web_fetch"}`, `{"type":"web_fetch_20260209","name":"web_fetch"}`},
		"allowed and blocked":           {`{"type":"web_fetch_20250910","name":"web_fetch","allowed_domains":["a.example"],"blocked_domains":["b.example"]}`},
		"negative max_uses":             {`{"type":"web_fetch_20250910","name":"web_fetch","max_uses":-1}`},
		"a client tool named web_fetch": {`{"type":"web_fetch_20250910","name":"web_fetch"}`, `{"name":"web_fetch","input_schema":{"type":"object"}}`},
	} {
		if _, err := plan(req(tools...), nil); !fault.Is(err, fault.Invalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestPlanWebFetchDomainsCoverHosts: the domain lists match hosts, on
// every port, a domain with its subdomains, so an entry naming a port, a
// wildcard or no host would match nothing (and a blocked one would block
// nothing): the request is refused as invalid, naming the entry and what
// to write instead. URLs without a port, IPv6 addresses (bracketed or
// not) and names in another script are hosts.
func TestPlanWebFetchDomainsCoverHosts(t *testing.T) {
	req := func(tool string) *wire.Request {
		var r wire.Request
		body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[` + tool + `]}`
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	for tool, want := range map[string]string{
		`{"type":"web_fetch_20250910","name":"web_fetch","allowed_domains":["example.test:8443"]}`:                    `tools.0.allowed_domains.0: "example.test:8443" names a port`,
		`{"type":"web_fetch_20260209","name":"web_fetch","blocked_domains":["a.example","https://b.example:8443/x"]}`: `tools.0.blocked_domains.1: "https://b.example:8443/x" names a port`,
		`{"type":"web_fetch_20260209","name":"web_fetch","blocked_domains":["[2001:db8::1]:443"]}`:                    `write the host alone ("2001:db8::1")`,
		`{"type":"web_fetch_20260209","name":"web_fetch","blocked_domains":["*.evil.example"]}`:                       `tools.0.blocked_domains.0: "*.evil.example" is a wildcard, but a domain covers its subdomains already: write "evil.example"`,
		`{"type":"web_fetch_20260209","name":"web_fetch","blocked_domains":["evil example"]}`:                         `tools.0.blocked_domains.0: "evil example" names no host`,
		`{"type":"web_fetch_20260209","name":"web_fetch","allowed_domains":["ok.example",""]}`:                        `tools.0.allowed_domains.1: "" names no host`,
	} {
		_, err := plan(req(tool), nil)
		if !fault.Is(err, fault.Invalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an invalid request saying %s", tool, err, want)
		}
	}
	for _, tool := range []string{
		`{"type":"web_fetch_20260209","name":"web_fetch","allowed_domains":["example.test","https://example.test/docs","2001:db8::1","[2001:db8::2]"]}`,
		`{"type":"web_fetch_20260209","name":"web_fetch","blocked_domains":["192.0.2.1","http://evil.example/"]}`,
		`{"type":"web_fetch_20260209","name":"web_fetch","blocked_domains":["bücher.example","Evil.EXAMPLE."]}`,
	} {
		if _, err := plan(req(tool), nil); err != nil {
			t.Errorf("%s: %v", tool, err)
		}
	}
}
