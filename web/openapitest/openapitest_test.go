package openapitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// testDoc is a small OpenAPI 3.1 document with the forms web/openapi.json
// uses: a JSON body, a wildcard path parameter, a HEAD operation and a
// GET one whose HEAD Fiber serves.
const testDoc = `{
  "openapi": "3.1.0",
  "info": {"title": "t", "version": "1"},
  "paths": {
    "/items": {
      "post": {
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}},
        "responses": {
          "201": {"description": "created", "content": {"application/json": {"schema": {
            "type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}}}},
          "400": {"description": "bad", "content": {"application/json": {"schema": {"type": "object"}}}}
        }
      },
      "get": {
        "responses": {"200": {"description": "ok", "content": {"text/event-stream": {"x-threadbox-event-schema": "#/components/schemas/Event"}}}}
      }
    },
    "/files/{key}": {
      "put": {
        "parameters": [{"name": "key", "in": "path", "required": true, "schema": {"type": "string"}, "x-threadbox-wildcard": true}],
        "requestBody": {"content": {"*/*": {}}},
        "responses": {"200": {"description": "ok"}}
      },
      "get": {
        "parameters": [{"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "ok"}, "404": {"description": "none"}}
      }
    }
  },
  "components": {"schemas": {"Event": {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["ping", "done"]}}}}}
}`

// exchange builds a request and an answer with the given bodies.
func exchange(method, path, reqCT string, status int, respCT, respBody string) (*http.Request, *http.Response, []byte) {
	req := httptest.NewRequest(method, path, nil)
	if reqCT != "" {
		req.Header.Set("Content-Type", reqCT)
	}
	resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(respBody))}
	if respCT != "" {
		resp.Header.Set("Content-Type", respCT)
	}
	return req, resp, []byte(respBody)
}

// TestCheck checks the rule of Check, case by case.
func TestCheck(t *testing.T) {
	v, err := Load([]byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name           string
		method, path   string
		reqCT, reqBody string
		status         int
		respCT, body   string
		wantErr        string // a part of the error; empty for none
	}{
		{"documented exchange", "POST", "/items", "application/json", `{"name":"a"}`, 201, "application/json", `{"id":"x"}`, ""},
		{"answer off its schema", "POST", "/items", "application/json", `{"name":"a"}`, 201, "application/json", `{"id":7}`, "does not match the document"},
		{"undocumented status", "POST", "/items", "application/json", `{"name":"a"}`, 409, "application/json", `{}`, "status 409 is not documented"},
		{"refused request, refused", "POST", "/items", "application/json", `{}`, 400, "application/json", `{}`, ""},
		{"refused request, accepted", "POST", "/items", "application/json", `{}`, 201, "application/json", `{"id":"x"}`, "the document refuses the request"},
		{"unknown route, refused", "GET", "/nothing", "", "", 404, "application/json", `{}`, ""},
		{"unknown route, answered", "GET", "/nothing", "", "", 200, "application/json", `{}`, "no operation"},
		{"wildcard key with slashes", "PUT", "/files/a/b/c.txt", "application/json", "raw bytes", 200, "", "", ""},
		{"HEAD served by GET", "HEAD", "/files/k", "", "", 200, "", "", ""},
		{"HEAD with an undocumented status", "HEAD", "/files/k", "", "", 403, "", "", "status 403 is not documented"},
		{"stream of documented events", "GET", "/items", "", "", 200, "text/event-stream; charset=utf-8", "event: ping\ndata: {\"type\":\"ping\"}\n\nevent: done\ndata: {\"type\":\"done\"}\n\n", ""},
		{"stream with an undocumented event", "GET", "/items", "", "", 200, "text/event-stream", "event: boom\ndata: {\"type\":\"boom\"}\n\n", "does not match Event"},
		{"stream event misnamed", "GET", "/items", "", "", 200, "text/event-stream", "event: ping\ndata: {\"type\":\"done\"}\n\n", "is named \"ping\""},
		{"stream event not JSON", "GET", "/items", "", "", 200, "text/event-stream", "event: ping\ndata: {oops\n\n", "not JSON"},
		{"undocumented content type", "GET", "/items", "", "", 200, "application/json", `{}`, "does not match the document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, resp, body := exchange(c.method, c.path, c.reqCT, c.status, c.respCT, c.body)
			err := v.Check(context.Background(), req, []byte(c.reqBody), resp, body)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("Check: %v, want no error", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("Check: %v, want an error with %q", err, c.wantErr)
			}
		})
	}
}

// TestCheckUnreadStream checks an event stream passed on unread (nil body):
// only its status and content type are checked.
func TestCheckUnreadStream(t *testing.T) {
	v, err := Load([]byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	req, resp, _ := exchange("GET", "/items", "", 200, "text/event-stream", "")
	if err := v.Check(context.Background(), req, nil, resp, nil); err != nil {
		t.Errorf("stream: %v", err)
	}
	req, resp, _ = exchange("GET", "/items", "", 200, "text/html", "")
	if err := v.Check(context.Background(), req, nil, resp, nil); err == nil || !strings.Contains(err.Error(), "not documented") {
		t.Errorf("an unread answer of an undocumented content type: %v, want an error", err)
	}
}

// TestLoadRefusesAnInvalidDocument checks that a document kin-openapi
// finds invalid is not used.
func TestLoadRefusesAnInvalidDocument(t *testing.T) {
	if _, err := Load([]byte(`{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {"/a": {"get": {"responses": {"200": {}}}}}}`)); err == nil {
		t.Error("a response without a description loaded")
	}
}
