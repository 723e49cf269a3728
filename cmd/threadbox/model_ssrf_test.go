package main

import (
	"bytes"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestURLSourcesFetched: an image named by URL is fetched by threadbox and
// sent to the model as data, never as the URL; a URL of a loopback or
// private address, directly or through a redirect, is refused with a 400
// and never dialled, as are oversized and non-image answers.
func TestURLSourcesFetched(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 2000)...)
	// The "internal" service: loopback, never to be reached.
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits.Add(1)
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(png)
	}))
	defer internal.Close()
	// The "public" image host: on 127.0.0.2, which the server is told to
	// allow (URL_FETCH_ALLOW), standing for an address on the internet.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	public := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cat.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(png)
		case "/unlabelled":
			_, _ = w.Write(png) // sniffed as image/png
		case "/to-internal":
			http.Redirect(w, r, internal.URL+"/secret.png", http.StatusFound)
		case "/big.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(append(png, make([]byte, 64<<10)...))
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html></html>"))
		}
	})}}
	public.Start()
	defer public.Close()

	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			s, fake := modelServer(t, "", provider, map[string]string{"URL_FETCH_ALLOW": "127.0.0.2/32", "URL_FETCH_MAX_BYTES": "32768"})
			tok := s.bootstrap("acme", "admin@acme.test")
			image := func(u string) string {
				return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image","source":{"type":"url","url":"` + u + `"}}]}]}`
			}
			data := base64.StdEncoding.EncodeToString(png)
			tests := []struct {
				name, url string
				status    int
				message   string
			}{
				{"a public image is sent as data", public.URL + "/cat.png", 200, ""},
				{"an unlabelled image is sniffed", public.URL + "/unlabelled", 200, ""},
				{"loopback refused", internal.URL + "/secret.png", 400, "private, loopback or otherwise internal address"},
				{"a redirect inside refused", public.URL + "/to-internal", 400, "private, loopback or otherwise internal address"},
				{"localhost by name refused", strings.Replace(internal.URL, "127.0.0.1", "localhost", 1) + "/secret.png", 400, "internal address"},
				{"metadata address refused", "http://169.254.169.254/latest/meta-data/", 400, "internal address"},
				{"too large refused", public.URL + "/big.png", 400, "larger than 32768 bytes"},
				{"not an image refused", public.URL + "/page", 400, `"text/html"`},
				{"other schemes refused", "file:///etc/passwd", 400, "only http and https"},
			}
			for _, tc := range tests {
				before := len(fake.Requests())
				r := s.do("POST", "/api/gpt/v1/messages", tok, image(tc.url))
				if r.status != tc.status {
					t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
				}
				reqs := fake.Requests()[before:]
				if tc.status != 200 {
					msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
					if r.errorType(t) != "invalid_request_error" || !strings.Contains(msg, tc.message) || !strings.Contains(msg, "messages.0.content.1.source") {
						t.Fatalf("%s: %s, want an invalid_request_error saying %q", tc.name, r.body, tc.message)
					}
					if len(reqs) != 0 {
						t.Fatalf("%s: the model got the request: %s", tc.name, reqs[0].Body)
					}
					continue
				}
				if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), data) || strings.Contains(string(reqs[0].Body), public.URL) {
					t.Fatalf("%s: the model should get the image as data and not its URL: %d requests", tc.name, len(reqs))
				}
			}
			if n := internalHits.Load(); n != 0 {
				t.Fatalf("the internal service was reached %d times", n)
			}
		})
	}
}

// TestUnknownSourceTypesRefused: an image or document source of a type
// this server does not fetch and check — a made-up type, a misspelt
// "URL", a provider's file, one with members it does not know — is a 400
// naming the block, for validate and for the request, and nothing reaches
// the model server (an OpenAI-compatible one would be handed the URL to
// fetch from the operator's network). Checked sources pass and reach it as
// data.
func TestUnknownSourceTypesRefused(t *testing.T) {
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits.Add(1)
	}))
	defer internal.Close()
	secret := internal.URL + "/latest/meta-data/"
	body := func(block string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},` + block + `]}]}`
	}
	inResult := func(block string) string {
		return `{"model":"m","max_tokens":10,"tools":[{"name":"look","input_schema":{"type":"object"}}],"messages":[` +
			`{"role":"user","content":"look"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"look","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"found"},` + block + `]}]}]}`
	}
	const png = "iVBORw0KGgo="
	refused := []struct {
		name, body, message string
	}{
		{"a made-up type with a url", body(`{"type":"image","source":{"type":"link","url":"` + secret + `"}}`), `messages.0.content.1.source.type: "link" is not a source type`},
		{"a type in capitals", body(`{"type":"image","source":{"type":"URL","url":"` + secret + `"}}`), `"URL" is not a source type`},
		{"a provider's file", body(`{"type":"image","source":{"type":"file","file_id":"file_011"}}`), `"file" is not a source type`},
		{"no type", body(`{"type":"image","source":{"url":"` + secret + `"}}`), `messages.0.content.1.source.type: "" is not a source type`},
		{"no source", body(`{"type":"image","Source":{"type":"url","url":"` + secret + `"}}`), "messages.0.content.1.Source: member names are case-sensitive"},
		{"a url beside base64 data", body(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `","url":"` + secret + `"}}`), `messages.0.content.1.source.url: not a member of a "base64" source`},
		{"a second type member", body(`{"type":"image","source":{"type":"url","url":"` + secret + `","type":"base64","media_type":"image/png","data":"` + png + `"}}`), "messages.0.content.1.source.url: not a member"},
		{"a document of a made-up type", body(`{"type":"document","source":{"type":"web","url":"` + secret + `"}}`), `"web" is not a source type this server accepts for document blocks`},
		{"an image in a tool result", inResult(`{"type":"image","source":{"type":"remote","url":"` + secret + `"}}`), `messages.2.content.0.content.1.source.type: "remote"`},
		{"an image in a document's content", body(`{"type":"document","source":{"type":"content","content":[{"type":"image","source":{"type":"href","url":"` + secret + `"}}]}}`), `messages.0.content.1.source.content.0.source.type: "href"`},
		{"a media type that is not an image", body(`{"type":"image","source":{"type":"base64","media_type":"text/html","data":"PGgxPg=="}}`), `source.media_type: "text/html" is not one of`},
	}
	accepted := []struct {
		name, body, sent string // sent: what the model server gets, for the Anthropic provider
	}{
		{"a base64 image", body(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}`), `"data":"` + png + `"`},
		{"a text document", body(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain words"},"title":"notes"}`), `"data":"plain words"`},
		{"a document of text blocks", body(`{"type":"document","source":{"type":"content","content":[{"type":"text","text":"block words"}]}}`), `"text":"block words"`},
	}
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			s, fake := modelServer(t, "", provider, nil)
			tok := s.bootstrap("acme", "admin@acme.test")
			for _, tc := range refused {
				for _, path := range []string{"/api/gpt/v1/messages/validate", "/api/gpt/v1/messages"} {
					r := s.do("POST", path, tok, tc.body)
					if r.status != 400 || r.errorType(t) != "invalid_request_error" {
						t.Fatalf("%s: %s: %d %s, want 400 invalid_request_error", tc.name, path, r.status, r.body)
					}
					if msg, _ := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, tc.message) {
						t.Fatalf("%s: %s: %q, want it to say %q", tc.name, path, msg, tc.message)
					}
				}
				if reqs := fake.Requests(); len(reqs) != 0 {
					t.Fatalf("%s: the model server got the request: %s", tc.name, reqs[0].Body)
				}
			}
			for _, tc := range accepted {
				before := len(fake.Requests())
				if r := s.do("POST", "/api/gpt/v1/messages", tok, tc.body); r.status != 200 {
					t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
				}
				reqs := fake.Requests()[before:]
				if len(reqs) != 1 {
					t.Fatalf("%s: %d upstream requests, want 1", tc.name, len(reqs))
				}
				if provider == "anthropic" && !strings.Contains(string(reqs[0].Body), tc.sent) {
					t.Fatalf("%s: the model server got %s, want %s", tc.name, reqs[0].Body, tc.sent)
				}
			}
			if n := internalHits.Load(); n != 0 {
				t.Fatalf("the internal address was reached %d times", n)
			}
		})
	}
}
