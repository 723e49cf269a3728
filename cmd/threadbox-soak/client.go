package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// documentedTypes are the error types of the error envelope (docs/api.md).
var documentedTypes = map[string]bool{
	"authentication_error": true, "permission_error": true, "not_found_error": true,
	"invalid_request_error": true, "rate_limit_error": true, "api_error": true,
}

// apiError is an error answer of threadbox, or a failure to get one.
type apiError struct {
	Status    int    // 0 when no answer came (transport error)
	Type      string // the envelope's error type; "" when the body had none
	Message   string
	Transport error
	Raw       string
}

func (e *apiError) Error() string {
	if e.Transport != nil {
		return "transport: " + e.Transport.Error()
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// enveloped reports whether the answer had the error envelope with a
// documented type.
func (e *apiError) enveloped() bool { return e.Transport == nil && documentedTypes[e.Type] }

// parseError reads an error answer's envelope.
func parseError(status int, body []byte) *apiError {
	var env struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &apiError{Status: status, Raw: string(body)}
	if len(e.Raw) > 300 {
		e.Raw = e.Raw[:300]
	}
	if json.Unmarshal(body, &env) == nil && env.Type == "error" {
		e.Type, e.Message = env.Error.Type, env.Error.Message
	}
	return e
}

// client calls threadbox's HTTP API for one user.
type client struct {
	base  string
	hc    *http.Client
	token func() string
}

// do sends one request and reads the whole answer; a status of 400 or more
// is returned as an *apiError, as is a transport failure.
func (c *client) do(ctx context.Context, method, path string, body io.Reader, ctype string) ([]byte, error) {
	return c.doToken(ctx, c.token(), method, path, body, ctype)
}

func (c *client) doToken(ctx context.Context, token, method, path string, body io.Reader, ctype string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &apiError{Transport: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &apiError{Transport: err}
	}
	if resp.StatusCode >= 400 {
		return nil, parseError(resp.StatusCode, b)
	}
	return b, nil
}

// json sends v as JSON and decodes the answer into out (when not nil).
func (c *client) json(ctx context.Context, method, path string, v, out any) error {
	var body io.Reader
	if v != nil {
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		body = bytes.NewReader(j)
	}
	b, err := c.do(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: answer is not the expected JSON: %w: %.200s", method, path, err, b)
		}
	}
	return nil
}

// asAPIError returns err's *apiError, if it has one.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

func newHTTPClient() *http.Client {
	return &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 5 * time.Second}}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// jsonRaw is a JSON document given as text, sent as is.
type jsonRaw string

func (j jsonRaw) MarshalJSON() ([]byte, error) { return []byte(j), nil }
