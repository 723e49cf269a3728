package anthropic

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
)

// scripted answers each attempt of a request with the reply the script
// names for it and records every request it got, as sent.
type scripted struct {
	script []byte
	last   int // the attempt that may fail slowly (a connection error, a body cut short)
	stream bool

	mu   sync.Mutex
	sent []sentRequest
}

// sentRequest is what reaches an HTTP transport of a request.
type sentRequest struct {
	Method, URL, Host string
	Header            http.Header
	ContentLength     int64
	Body              string
	GetBody           bool
	Close             bool
	TransferEncoding  []string
}

const (
	okJSON   = `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`
	okStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

type cutBody struct{ r io.Reader }

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, errors.New("connection reset mid-body")
	}
	return n, err
}
func (b *cutBody) Close() error { return nil }

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	s.mu.Lock()
	n := len(s.sent)
	s.sent = append(s.sent, sentRequest{req.Method, req.URL.String(), req.Host, req.Header.Clone(), req.ContentLength, string(body),
		req.GetBody != nil, req.Close, req.TransferEncoding})
	s.mu.Unlock()
	kind := byte(0)
	if n < len(s.script) {
		kind = s.script[n] % 12
	}
	if n < s.last && (kind == 9 || kind == 10) {
		kind = 4 // only the last attempt fails in what the SDK waits half a second after
	}
	reply := func(status int, contentType, body string, h ...string) *http.Response {
		res := &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
		if contentType != "" {
			res.Header.Set("Content-Type", contentType)
		}
		res.Header.Set("Request-Id", "req_1")
		for i := 0; i+1 < len(h); i += 2 {
			res.Header.Set(h[i], h[i+1])
		}
		return res
	}
	ok := func() *http.Response {
		if s.stream {
			return reply(200, "text/event-stream", okStream)
		}
		return reply(200, "application/json", okJSON)
	}
	switch kind {
	case 1:
		return reply(200, "text/plain", "plain words"), nil
	case 2:
		return reply(400, "application/json", `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`), nil
	case 3:
		return reply(401, "text/html", "<html>no</html>"), nil
	case 4:
		return reply(429, "application/json", `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`, "Retry-After-Ms", "0"), nil
	case 5:
		return reply(500, "application/json", `{"type":"error","error":{"type":"api_error","message":"x"}}`, "X-Should-Retry", "false"), nil
	case 6:
		return reply(529, "application/json", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`, "Retry-After-Ms", "0"), nil
	case 7:
		return reply(503, "application/json", `{"type":"error","error":{"type":"api_error","message":"later"}}`, "Retry-After", "100"), nil
	case 8:
		return reply(408, "", "", "Retry-After", "0"), nil
	case 9:
		return nil, errors.New("connection refused")
	case 10:
		res := ok()
		res.Body = &cutBody{strings.NewReader(`{"id":`)}
		return res, nil
	case 11:
		return reply(409, "application/json", `not json`, "Retry-After-Ms", "0.5", "X-Should-Retry", "true"), nil
	}
	return ok(), nil
}

// outcome is what a post came to, in terms both paths can be held to.
type outcome struct {
	Raw        string
	Status     int
	Header     http.Header
	Body       string
	BodyErr    string
	Err        string
	API        bool
	APIStatus  int
	APIType    string
	APIMessage string
	RequestID  string
	Sent       []sentRequest
}

func postOnce(t *testing.T, cfg Config, body []byte, stream bool, script []byte, viaSender bool) outcome {
	rt := &scripted{script: script, stream: stream, last: cfg.Retries()}
	cfg.HTTPClient = &http.Client{Transport: rt}
	m := New(cfg)
	if !viaSender {
		m.send = nil
	}
	raw, res, err := m.post(context.Background(), body, stream)
	var o outcome
	o.Raw = string(raw)
	if res != nil {
		o.Status, o.Header = res.StatusCode, res.Header
		b, rerr := io.ReadAll(res.Body)
		_ = res.Body.Close()
		o.Body = string(b)
		if rerr != nil {
			o.BodyErr = rerr.Error()
		}
	}
	if err != nil {
		o.Err = err.Error()
		var apiErr *sdk.Error
		if errors.As(err, &apiErr) {
			o.API, o.APIStatus, o.APIType, o.APIMessage, o.RequestID = true, apiErr.StatusCode, string(apiErr.Type()), apiErr.Message, apiErr.RequestID
		}
	}
	o.Sent = rt.sent
	return o
}

// FuzzSendIsSDKs holds the hand-written sender to the SDK's client.Post:
// for any key, base address, body and run of upstream replies (errors,
// retries, bodies cut short), both send the same requests (method,
// address, headers, body) and come to the same reply or error.
func FuzzSendIsSDKs(f *testing.F) {
	f.Add("sk-test", "http://127.0.0.1:9/v1", []byte(`{"messages":[],"max_tokens":1}`), false, uint8(3), []byte{})
	f.Add("", "http://upstream.test", []byte(`{}`), true, uint8(3), []byte{6, 4, 0})
	f.Add("k", "https://h.test:8443/base/", []byte(`{"a":1}`), false, uint8(2), []byte{4, 6, 9})
	f.Add("k", "http://h.test/", []byte(`x`), true, uint8(1), []byte{11, 2})
	f.Add("k", "http://h.test", []byte(`{}`), false, uint8(0), []byte{10})
	f.Add("k", "http://h.test", []byte(`{}`), false, uint8(2), []byte{8, 7, 5})
	f.Add("k", "http://h.test", []byte(`{}`), false, uint8(1), []byte{3})
	f.Add("k", "http://h.test", []byte(`{}`), true, uint8(1), []byte{1, 10})
	f.Add("k\r\nx: y", "::not a url", []byte{}, false, uint8(1), []byte{})
	f.Fuzz(func(t *testing.T, key, base string, body []byte, stream bool, retries uint8, script []byte) {
		cfg := Config{BaseURL: base, APIKey: key, Model: "m", MaxRetries: -1}
		if r := int(retries % 4); r > 0 {
			cfg.MaxRetries = r
		}
		got := postOnce(t, cfg, body, stream, script, true)
		want := postOnce(t, cfg, body, stream, script, false)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the sender and the SDK differ:\nsender: %+v\nSDK:    %+v", got, want)
		}
	})
}

// TestSenderIsUsed: a usual configuration sends without the SDK's
// request configuration (FuzzSendIsSDKs holds it to the SDK's requests).
func TestSenderIsUsed(t *testing.T) {
	for _, cfg := range []Config{
		{BaseURL: "http://127.0.0.1:9", Model: "m"},
		{BaseURL: "https://api.example.test/v1", APIKey: "sk", Model: "m", MaxRetries: -1},
		{APIKey: "sk", Model: "m"},
	} {
		if New(cfg).send == nil {
			t.Errorf("%+v: no sender", cfg)
		}
	}
}
