package web

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"threadbox/web/openapitest"
)

// fiberRouteExtension names, on a documented path, the Fiber route that
// serves it when the path is not that route's direct translation (a file's
// /content is served by the Files API's wildcard route).
const fiberRouteExtension = "x-fiber-route"

// loadOpenAPI loads web/openapi.json, failing the test when it is not a
// valid OpenAPI document.
func loadOpenAPI(t *testing.T) *openapitest.Validator {
	t.Helper()
	v, err := openapitest.Load(OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOpenAPIDocumentValidates loads and validates web/openapi.json as an
// OpenAPI 3.1 document, and checks GET /api/openapi.json serves it.
func TestOpenAPIDocumentValidates(t *testing.T) {
	v := loadOpenAPI(t)
	if got := v.Doc().OpenAPI; got != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", got)
	}
	s := New(Services{}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	resp, err := s.App().Test(httptest.NewRequest(http.MethodGet, "/api/openapi.json", nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !bytes.Equal(b, OpenAPIDocument()) {
		t.Errorf("GET /api/openapi.json: %d %q, %d bytes; want 200, JSON, the %d bytes of web/openapi.json",
			resp.StatusCode, resp.Header.Get("Content-Type"), len(b), len(OpenAPIDocument()))
	}
}

// fiberTemplate writes a Fiber route path as an OpenAPI path template:
// ":name" becomes "{name}" and the wildcard "*" becomes "{*}".
func fiberTemplate(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":"):
			segs[i] = "{" + strings.TrimSuffix(s[1:], "?") + "}"
		case s == "*":
			segs[i] = "{*}"
		}
	}
	return strings.Join(segs, "/")
}

var templateParam = regexp.MustCompile(`\{([^{}/]+)\}`)

// documentedRoute returns the Fiber route template that serves a
// documented operation: x-fiber-route when the path names one, otherwise
// the path itself with its wildcard parameter (x-threadbox-wildcard)
// written "{*}".
func documentedRoute(path string, item *openapi3.PathItem, op *openapi3.Operation) string {
	if r, ok := item.Extensions[fiberRouteExtension].(string); ok {
		return fiberTemplate(r)
	}
	params := slices.Concat(item.Parameters, op.Parameters)
	return templateParam.ReplaceAllStringFunc(path, func(m string) string {
		name := m[1 : len(m)-1]
		for _, p := range params {
			if p.Value != nil && p.Value.In == openapi3.ParameterInPath && p.Value.Name == name && p.Value.Extensions[openapitest.WildcardExtension] == true {
				return "{*}"
			}
		}
		return m
	})
}

// TestOpenAPICoversEveryRoute fails when a route of routes.go is missing
// from the document or differs from it in method or path, and when the
// document has an operation no route serves. A documented path matches a
// route when it is the route's path with ":name" written "{name}" and the
// wildcard "*" as the last parameter, marked x-threadbox-wildcard (a value
// that may hold '/'), or when its x-fiber-route names the route. A HEAD
// route needs no HEAD operation when the path has a GET one: Fiber
// registers HEAD with every GET route.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t).Doc()
	documented := map[string]string{} // "METHOD template" -> the documented path
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented[method+" "+documentedRoute(path, item, op)] = path
		}
	}
	s := New(Services{}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	served := map[string]bool{}
	for _, r := range s.App().GetRoutes(true) {
		key := r.Method + " " + fiberTemplate(r.Path)
		served[key] = true
		if _, ok := documented[key]; ok {
			continue
		}
		if _, ok := documented[http.MethodGet+" "+fiberTemplate(r.Path)]; ok && r.Method == http.MethodHead {
			continue
		}
		t.Errorf("route %s %s (routes.go) is not in web/openapi.json", r.Method, r.Path)
	}
	if len(served) < 50 {
		t.Fatalf("only %d routes found: GetRoutes changed?", len(served))
	}
	for key, path := range documented {
		if !served[key] {
			t.Errorf("web/openapi.json documents %s (path %s), which no route of routes.go serves", key, path)
		}
	}
}

// TestOpenAPIStatusRule checks the statuses each operation documents
// against the rule of docs/openapi.md, which follows the error mapping of
// errors.go and the middleware of routes.go:
//   - at least one 2xx (or 304) status, and 500 (errorHandler's internal
//     error, recoverPanics) on every operation;
//   - 401 and 403 on every operation behind authenticate (bearer or
//     X-Api-Key security: a bad token, a sandbox token outside /api/gpt/, a
//     role or the org's policy), 401 on one that takes another token;
//   - 404 on every operation with a path parameter (the resource, or one
//     the caller may not see);
//   - 400 and 413 on every operation with a request body (parseJSON and
//     the upload paths refuse malformed and oversized bodies);
//   - every 4xx and 5xx documents the error envelope as application/json,
//     except on HEAD, whose answers have no body, and GET /readyz's 503,
//     which is the readiness view.
//
// Which status each handler returns for what is checked where it happens:
// the acceptance tests validate every answer they get, and an undocumented
// status fails them (docs/openapi.md).
func TestOpenAPIStatusRule(t *testing.T) {
	doc := loadOpenAPI(t).Doc()
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			has := func(status int) bool { return op.Responses.Status(status) != nil }
			var want []int
			success := false
			for code := range op.Responses.Map() {
				n, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s: response %q: only numeric statuses are documented", name, code)
					continue
				}
				success = success || (n >= 200 && n < 300) || n == http.StatusNotModified
				resp := op.Responses.Status(n).Value
				// GET /readyz's 503 is its readiness view, not an error.
				if n >= 400 && method != http.MethodHead && op.OperationID != "ready" {
					mt := resp.Content.Get("application/json")
					if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/Error" {
						t.Errorf("%s: %d does not document the error envelope", name, n)
					}
				}
			}
			if !success {
				t.Errorf("%s documents no success status", name)
			}
			want = append(want, http.StatusInternalServerError)
			security := doc.Security
			if op.Security != nil {
				security = *op.Security
			}
			for _, req := range security {
				if _, ok := req["bearerAuth"]; ok {
					want = append(want, http.StatusUnauthorized, http.StatusForbidden)
				} else {
					want = append(want, http.StatusUnauthorized)
				}
			}
			for _, p := range slices.Concat(item.Parameters, op.Parameters) {
				if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
					want = append(want, http.StatusNotFound)
				}
			}
			if op.RequestBody != nil {
				want = append(want, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
			}
			slices.Sort(want)
			for _, st := range slices.Compact(want) {
				if !has(st) {
					t.Errorf("%s does not document %d", name, st)
				}
			}
		}
	}
}

// TestOpenAPIAnswersWithoutToken sends a request without credentials to
// every route of routes.go and checks the exchange against the document:
// each answer has a documented status and matches its schema, and exactly
// the operations documented with bearer security answer 401.
func TestOpenAPIAnswersWithoutToken(t *testing.T) {
	v := loadOpenAPI(t)
	s := New(Services{}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	seen := map[string]bool{}
	checked := 0
	for _, r := range s.App().GetRoutes(true) {
		path := strings.ReplaceAll(fiberTemplate(r.Path), "{*}", "a/b")
		path = templateParam.ReplaceAllString(path, "x")
		if seen[r.Method+" "+path] {
			continue
		}
		seen[r.Method+" "+path] = true
		req := httptest.NewRequest(r.Method, path, nil)
		resp, err := s.App().Test(req, -1)
		if err != nil {
			t.Fatalf("%s %s: %v", r.Method, path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := v.Check(context.Background(), req, nil, resp, body); err != nil {
			t.Error(err)
		}
		route, _, err := v.Find(r.Method, path)
		if err != nil {
			t.Errorf("%s %s: %v", r.Method, path, err)
			continue
		}
		security := v.Doc().Security
		if route.Operation.Security != nil {
			security = *route.Operation.Security
		}
		bearer := slices.ContainsFunc(security, func(req openapi3.SecurityRequirement) bool { _, ok := req["bearerAuth"]; return ok })
		if bearer != (resp.StatusCode == http.StatusUnauthorized) {
			t.Errorf("%s %s without a token answered %d; documented with bearer security: %v", r.Method, path, resp.StatusCode, bearer)
		}
		checked++
	}
	if checked < 50 {
		t.Errorf("only %d routes checked", checked)
	}
}
