package main

import (
	"strings"
	"testing"
)

// TestUnknownToolTypes: a typed tool this server does not run (a web
// search, a computer tool, ...) would reach the upstream with the
// operator's key, so it is refused with a 400 unless ALLOW_TOOL_TYPES names
// it; client tools, typed "custom" or untyped, pass.
func TestUnknownToolTypes(t *testing.T) {
	body := func(tools string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":` + tools + `}`
	}
	const search = `[{"type":"web_search_20250305","name":"web_search","max_uses":3}]`
	const client = `[{"name":"lookup","input_schema":{"type":"object"}},{"type":"custom","name":"other","input_schema":{"type":"object"}}]`
	tests := []struct {
		name    string
		allow   string
		tools   string
		status  int
		message string // part of the error message, or of the upstream request's body when 200
	}{
		{"unknown type refused", "", search, 400, `"web_search_20250305" is not a tool type this server accepts`},
		{"another unknown type refused", "web_search_20250305", `[{"type":"computer_20250124","name":"computer","display_width_px":800,"display_height_px":600}]`, 400, `"computer_20250124" is not a tool type`},
		{"custom without a schema refused", "", `[{"type":"custom","name":"x"}]`, 400, "input_schema: required"},
		{"client tools pass", "", client, 200, `"name":"other"`},
		{"an allowed type goes to the model as sent", "web_search_20250305", search, 200, `"type":"web_search_20250305","name":"web_search","max_uses":3`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fake := modelServer(t, "", "anthropic", map[string]string{"ALLOW_TOOL_TYPES": tc.allow})
			tok := s.bootstrap("acme", "admin@acme.test")
			for _, path := range []string{"/api/gpt/v1/messages/validate", "/api/gpt/v1/messages"} {
				r := s.do("POST", path, tok, body(tc.tools))
				if r.status != tc.status {
					t.Fatalf("%s: %d %s, want %d", path, r.status, r.body, tc.status)
				}
				if tc.status != 200 {
					msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
					if r.errorType(t) != "invalid_request_error" || !strings.Contains(msg, tc.message) {
						t.Fatalf("%s: %s, want an invalid_request_error saying %q", path, r.body, tc.message)
					}
				}
			}
			reqs := fake.Requests()
			if tc.status != 200 {
				if len(reqs) != 0 {
					t.Fatalf("a refused request reached the upstream: %s", reqs[0].Body)
				}
				return
			}
			if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), tc.message) {
				t.Fatalf("upstream requests %d, want one carrying %s", len(reqs), tc.message)
			}
		})
	}
}
