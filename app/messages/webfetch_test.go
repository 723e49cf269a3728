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
