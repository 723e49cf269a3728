package web

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// TestFaultKindsAnswered: the one mapper answers every fault kind with its
// status and the envelope's error type — those a detached turn's log
// keeps of a failed turn (the model upstream's failure, a timeout) too, so
// that a client reading the log is answered as the turn's own client was.
func TestFaultKindsAnswered(t *testing.T) {
	tests := []struct {
		kind   fault.Kind
		status int
		typ    string
	}{
		{fault.Invalid, 400, "invalid_request_error"},
		{fault.Unauthenticated, 401, "authentication_error"},
		{fault.Forbidden, 403, "permission_error"},
		{fault.NotFound, 404, "not_found_error"},
		{fault.Conflict, 409, "invalid_request_error"},
		{fault.TooLarge, 413, "invalid_request_error"},
		{fault.RateLimited, 429, "rate_limit_error"},
		{fault.Upstream, 502, "api_error"},
		{fault.Unavailable, 503, "api_error"},
		{fault.Timeout, 504, "api_error"},
		{fault.Internal, 500, "api_error"},
	}
	for _, tc := range tests {
		if st := statusOf(tc.kind); st != tc.status || typeOf(st) != tc.typ {
			t.Errorf("%s: answered %d %s, want %d %s", tc.kind, st, typeOf(st), tc.status, tc.typ)
		}
	}
}

// callAs sends method path with the JSON body (none when "") to app and
// returns the status, the error envelope's type ("" on success) and the
// body.
func callAs(t *testing.T, app *fiber.App, method, path, body string) (status int, errType string, raw []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := app.Test(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Type string } `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Type, raw
}
