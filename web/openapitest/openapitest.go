// Package openapitest checks HTTP exchanges against threadbox's OpenAPI
// document (web/openapi.json) with kin-openapi, for the tests: the web
// package's route coverage test and the API acceptance tests in
// cmd/threadbox, which check every request they send and every answer they
// get (docs/openapi.md).
//
// The rule of Check: the exchange must have a documented operation (or be
// refused with a 4xx, as a request to an unknown route is); a request the
// document refuses must be refused by the server too (a 4xx), so the
// document is never stricter than the server; and every answer, refusals
// included, must have a documented status and match its documented
// headers, content type and schema. An event stream read whole is checked
// event by event against the schema its media type names; file bytes, and
// a stream passed on unread, by status and content type only.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// WildcardExtension marks a path parameter whose value may hold '/': the
// Fiber route serving it ends in a wildcard (*), which OpenAPI's path
// templates cannot say.
const WildcardExtension = "x-threadbox-wildcard"

// Validator checks exchanges against one document. It is safe for
// concurrent use.
type Validator struct {
	doc       *openapi3.T
	router    routers.Router
	wildcards []wildcardPath
	opts      *openapi3filter.Options
}

// wildcardPath is a documented path whose last parameter is a wildcard,
// matched by a regular expression when the router finds no route.
type wildcardPath struct {
	path   string
	re     *regexp.Regexp
	params []string // the path parameters' names, in order
}

// Load parses and validates the document and prepares its router.
func Load(docJSON []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docJSON)
	if err != nil {
		return nil, fmt.Errorf("openapitest: load the document: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapitest: the document is not valid OpenAPI: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapitest: route the document: %w", err)
	}
	v := &Validator{doc: doc, router: router, opts: &openapi3filter.Options{
		IncludeResponseStatus: true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		MultiError:            true,
	}}
	for path, item := range doc.Paths.Map() {
		if wp, ok := wildcardOf(path, item); ok {
			v.wildcards = append(v.wildcards, wp)
		}
	}
	// Longer paths first: the most specific template wins.
	sort.Slice(v.wildcards, func(i, j int) bool { return len(v.wildcards[i].path) > len(v.wildcards[j].path) })
	return v, nil
}

// Doc returns the parsed document.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// templateParam matches one path template parameter.
var templateParam = regexp.MustCompile(`\{([^{}/]+)\}`)

// wildcardOf returns the matcher of a path whose last parameter is marked
// as a wildcard, at the path or at any of its operations.
func wildcardOf(path string, item *openapi3.PathItem) (wildcardPath, bool) {
	names := templateParam.FindAllStringSubmatch(path, -1)
	if len(names) == 0 {
		return wildcardPath{}, false
	}
	last := names[len(names)-1][1]
	isWild := func(ps openapi3.Parameters) bool {
		for _, p := range ps {
			if p.Value != nil && p.Value.In == openapi3.ParameterInPath && p.Value.Name == last && p.Value.Extensions[WildcardExtension] == true {
				return true
			}
		}
		return false
	}
	wild := isWild(item.Parameters)
	for _, op := range item.Operations() {
		wild = wild || isWild(op.Parameters)
	}
	if !wild {
		return wildcardPath{}, false
	}
	var b strings.Builder
	b.WriteString("^")
	rest := path
	var params []string
	for _, m := range templateParam.FindAllStringSubmatchIndex(path, -1) {
		b.WriteString(regexp.QuoteMeta(path[len(path)-len(rest) : m[0]]))
		name := path[m[2]:m[3]]
		if name == last {
			b.WriteString("(.+)")
		} else {
			b.WriteString("([^/]+)")
		}
		params = append(params, name)
		rest = path[m[1]:]
	}
	b.WriteString(regexp.QuoteMeta(rest))
	b.WriteString("$")
	return wildcardPath{path: path, re: regexp.MustCompile(b.String()), params: params}, true
}

// Find returns the documented operation serving method and the raw
// (escaped) URL path, and its path parameters. A HEAD request without a
// documented HEAD operation is served by the path's GET operation, as Fiber
// registers a HEAD route with each GET route.
func (v *Validator) Find(method, rawPath string) (*routers.Route, map[string]string, error) {
	for _, m := range []string{method, http.MethodGet} {
		r, params, err := v.find(m, rawPath)
		if err == nil || method != http.MethodHead {
			return r, params, err
		}
	}
	return nil, nil, routers.ErrPathNotFound
}

func (v *Validator) find(method, rawPath string) (*routers.Route, map[string]string, error) {
	req, err := http.NewRequest(method, "http://threadbox.test"+rawPath, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("openapitest: %w", err)
	}
	r, params, err := v.router.FindRoute(req)
	if err == nil {
		return r, params, nil
	}
	for _, wp := range v.wildcards {
		m := wp.re.FindStringSubmatch(rawPath)
		if m == nil {
			continue
		}
		item := v.doc.Paths.Value(wp.path)
		op := item.GetOperation(method)
		if op == nil {
			continue
		}
		params := make(map[string]string, len(wp.params))
		for i, name := range wp.params {
			params[name] = m[i+1]
		}
		return &routers.Route{Spec: v.doc, Path: wp.path, PathItem: item, Method: method, Operation: op}, params, nil
	}
	return nil, nil, fmt.Errorf("openapitest: %w", err)
}

// Check checks one exchange: req (whose body, already sent, is reqBody)
// and the answer resp (whose body, already read, is respBody; nil when it
// was not read, as for an event stream). The error lists every mismatch.
func (v *Validator) Check(ctx context.Context, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	status := resp.StatusCode
	route, params, err := v.Find(req.Method, req.URL.EscapedPath())
	if err != nil {
		if status >= 400 && status < 500 {
			return nil // an unknown route, refused
		}
		return fmt.Errorf("%s %s answered %d, but the document has no operation for it: %w", req.Method, req.URL.Path, status, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: withBody(req, reqBody), PathParams: params, Route: route, Options: v.opts}
	var problems []string
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && (status < 400 || status >= 500) {
		problems = append(problems, fmt.Sprintf("the document refuses the request, but the server answered %d: %v", status, reqErr))
	}
	if route.Operation.Responses.Status(status) == nil {
		problems = append(problems, fmt.Sprintf("status %d is not documented for %s %s", status, route.Method, route.Path))
	} else {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: resp.Header, Options: v.opts}
		lines := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-jsonl")
		if respBody == nil || lines {
			o := *v.opts
			o.ExcludeResponseBody = true
			out.Options = &o
			if err := checkContentType(route.Operation.Responses.Status(status).Value, resp.Header.Get("Content-Type")); err != nil {
				problems = append(problems, err.Error())
			}
		}
		out.SetBodyBytes(respBody)
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			problems = append(problems, fmt.Sprintf("the answer (%d) does not match the document: %v", status, err))
		}
		if respBody != nil {
			problems = append(problems, v.checkEvents(route.Operation.Responses.Status(status).Value, resp.Header.Get("Content-Type"), respBody)...)
			problems = append(problems, v.checkLines(route.Operation.Responses.Status(status).Value, resp.Header.Get("Content-Type"), respBody)...)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s (operation %s): %s", req.Method, req.URL.Path, route.Operation.OperationID, strings.Join(problems, "; "))
}

// LineSchemaExtension, on an application/x-jsonl media type, names the
// schema of each line ("#/components/schemas/Name"), which OpenAPI 3.1
// cannot say either.
const LineSchemaExtension = "x-threadbox-line-schema"

// checkLines checks each line of a JSON Lines body against the schema its
// media type names (LineSchemaExtension).
func (v *Validator) checkLines(r *openapi3.Response, ct string, body []byte) []string {
	if r == nil || !strings.HasPrefix(ct, "application/x-jsonl") {
		return nil
	}
	mt := r.Content.Get("application/x-jsonl")
	if mt == nil {
		return []string{"the document has no application/x-jsonl answer"}
	}
	ref, _ := mt.Extensions[LineSchemaExtension].(string)
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	sch := v.doc.Components.Schemas[name]
	if !ok || sch == nil || sch.Value == nil {
		return []string{fmt.Sprintf("%s %q names no schema of the document", LineSchemaExtension, ref)}
	}
	var problems []string
	for i, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		if line == "" {
			continue
		}
		var val any
		if err := json.Unmarshal([]byte(line), &val); err != nil {
			problems = append(problems, fmt.Sprintf("line %d is not JSON: %v", i+1, err))
			continue
		}
		if err := sch.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
			problems = append(problems, fmt.Sprintf("line %d does not match %s: %v", i+1, name, err))
		}
	}
	return problems
}

// EventSchemaExtension, on a text/event-stream media type, names the
// schema of each event's data ("#/components/schemas/Name"): OpenAPI 3.1
// has no way to describe the events of a stream (3.2's itemSchema does).
const EventSchemaExtension = "x-threadbox-event-schema"

// checkEvents checks each event of a read event stream against the schema
// its media type names (EventSchemaExtension): its data must be JSON
// matching the schema, and its event name the data's type.
func (v *Validator) checkEvents(r *openapi3.Response, ct string, body []byte) []string {
	if r == nil || !strings.HasPrefix(ct, "text/event-stream") {
		return nil
	}
	mt := r.Content.Get(ct)
	if mt == nil {
		return nil
	}
	ref, _ := mt.Extensions[EventSchemaExtension].(string)
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	sch := v.doc.Components.Schemas[name]
	if !ok || sch == nil || sch.Value == nil {
		return []string{fmt.Sprintf("%s %q names no schema of the document", EventSchemaExtension, ref)}
	}
	var problems []string
	for i, ev := range strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n\n") {
		var event, data string
		for _, line := range strings.Split(ev, "\n") {
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(line[len("event:"):])
			case strings.HasPrefix(line, "data:"):
				data += strings.TrimSpace(line[len("data:"):])
			}
		}
		if data == "" {
			continue // a comment, or the end of the stream
		}
		var val any
		if err := json.Unmarshal([]byte(data), &val); err != nil {
			problems = append(problems, fmt.Sprintf("event %d (%s): its data is not JSON: %v", i, event, err))
			continue
		}
		if err := sch.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
			problems = append(problems, fmt.Sprintf("event %d (%s) does not match %s: %v", i, event, name, err))
		}
		if m, _ := val.(map[string]any); event != "" && m["type"] != event {
			problems = append(problems, fmt.Sprintf("event %d is named %q but its data's type is %v", i, event, m["type"]))
		}
	}
	return problems
}

// checkContentType checks a response's content type when its body is not
// read: it must be one the response documents.
func checkContentType(r *openapi3.Response, ct string) error {
	if r == nil || len(r.Content) == 0 {
		return nil
	}
	if r.Content.Get(ct) == nil {
		return fmt.Errorf("content type %q is not documented", ct)
	}
	return nil
}

// withBody returns a copy of req whose body is b (to be read by the
// validator; the original was sent).
func withBody(req *http.Request, b []byte) *http.Request {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	if len(b) == 0 {
		r.Body = http.NoBody
	}
	return r
}
