package anthropic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// doer sends one HTTP request: what the SDK's option.WithHTTPClient takes.
type doer interface {
	Do(*http.Request) (*http.Response, error)
}

// sender posts the adapter's Messages requests as the SDK's client.Post
// does for them — the same request, header for header and byte for byte,
// the same retries and the same errors — without the SDK's request
// configuration per call: it builds a dozen default headers through
// net/http's canonicalisation, parses the address, applies every client
// option and clones the request per attempt, a tenth of a plain Messages
// API request's CPU. The request's head is what the SDK itself built once,
// at New, for each kind of call (stream or not), caught by a doer that
// sends nothing; only the retry count changes per attempt.
// FuzzSendIsSDKs holds the two paths to the same requests and outcomes.
type sender struct {
	next    doer
	mw      func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error)
	retries int
	// call is the request of each kind as the SDK makes it: [0] a
	// non-streamed step, [1] a streamed one.
	call [2]sentHead
}

// sentHead is what the SDK sends besides the body and the retry count.
type sentHead struct {
	method string
	url    url.URL
	host   string
	// header is the request's header for each attempt (the retry count is
	// the only header that changes): shared by every request, never
	// written once built.
	header []http.Header
	// timeout is each attempt's time limit (0: none).
	timeout time.Duration
}

// newSender returns the sender for a client built with opts, sending
// through next with the middleware mw, or nil when the SDK's requests
// could not be caught (the adapter then sends through the SDK).
func newSender(opts []option.RequestOption, next doer, mw func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error), retries int) *sender {
	s := &sender{next: next, mw: mw, retries: retries}
	for i, stream := range []bool{false, true} {
		h, ok := catchHead(opts, stream)
		if !ok {
			return nil
		}
		h.header = make([]http.Header, retries+1)
		for n := range h.header {
			h.header[n] = h.header0.Clone()
			if h.countRetries {
				h.header[n]["X-Stainless-Retry-Count"] = []string{strconv.Itoa(n)}
			}
		}
		s.call[i] = h.sentHead
	}
	return s
}

// caught is a request the SDK made, as catchHead saw it.
type caught struct {
	sentHead
	header0      http.Header
	countRetries bool
}

// catchHead has the SDK build the request of a step (streamed or not) with
// opts and catches it before it is sent.
func catchHead(opts []option.RequestOption, stream bool) (caught, bool) {
	var got *http.Request
	catch := doerFunc(func(req *http.Request) (*http.Response, error) {
		got = req
		return nil, errCaught
	})
	c := sdk.NewClient(append(opts[:len(opts):len(opts)], option.WithHTTPClient(catch), option.WithMaxRetries(0))...)
	body := []byte(`{}`)
	var err error
	if stream {
		var raw *http.Response
		err = c.Post(context.Background(), "v1/messages", nil, &raw, option.WithRequestBody("application/json", body))
	} else {
		var raw []byte
		err = c.Post(context.Background(), "v1/messages", body, &raw, option.WithRequestTimeout(nonStreamingTimeout))
	}
	if got == nil || !errors.Is(err, errCaught) || got.URL == nil || got.ContentLength != int64(len(body)) || got.GetBody == nil {
		return caught{}, false
	}
	h := caught{sentHead: sentHead{method: got.Method, url: *got.URL, host: got.Host}, header0: got.Header.Clone()}
	if got.URL.User != nil {
		u := *got.URL.User
		h.url.User = &u
	}
	// The SDK counts the attempts in this header unless an option set it.
	h.countRetries = got.Header.Get("X-Stainless-Retry-Count") == "0"
	if !stream {
		h.timeout = nonStreamingTimeout
	}
	return h, true
}

var errCaught = errors.New("anthropic: request caught")

type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }

// post sends body as the SDK's client.Post does. A non-streamed step's
// reply is read whole (raw); a streamed one's is handed over unread (res).
// Errors are the SDK's: a connection error as the HTTP client gave it, an
// error status as an *sdk.Error, the caller's context error.
func (s *sender) post(ctx context.Context, body []byte, stream bool) (raw []byte, res *http.Response, err error) {
	h := &s.call[0]
	if stream {
		h = &s.call[1]
	}
	cancel := func() {}
	defer func() { cancel() }()
	var req *http.Request
	for retry := 0; ; retry++ {
		cancel() // the attempt before's
		var actx context.Context
		actx, cancel = h.attemptContext(ctx)
		req = h.request(actx, body, retry)
		last := retry >= s.retries
		res, err = s.mw(req, s.next.Do)
		again := shouldRetry(res)
		var readErr error
		raw = nil
		if err == nil && res != nil && (last || !again) && (res.StatusCode >= 400 || !stream) {
			raw, readErr = readBody(res)
		}
		if cerr := ctx.Err(); cerr != nil {
			closeBody(res)
			return nil, nil, cerr
		}
		if aerr := actx.Err(); aerr != nil {
			closeBody(res)
			res, err, readErr = nil, aerr, nil
			again = true
		}
		if readErr != nil {
			err = readErr
			again = true
			if v, ok := retryHeader(res); ok && !v {
				again = false
			}
		}
		if last || !again {
			break
		}
		closeBody(res)
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(retryDelay(res, retry)):
		}
	}
	switch {
	case err != nil:
		return nil, nil, err
	case res.StatusCode >= 400:
		return nil, nil, apiError(req, res, raw)
	case stream:
		return nil, res, nil
	}
	return raw, nil, nil
}

// request is attempt retry of body under h, in ctx.
func (h *sentHead) request(ctx context.Context, body []byte, retry int) *http.Request {
	u := h.url
	header := h.header[min(retry, len(h.header)-1)]
	req := &http.Request{
		Method: h.method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Host: h.host, ContentLength: int64(len(body)),
		GetBody: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
	}
	req.Body, _ = req.GetBody()
	return req.WithContext(ctx)
}

// attemptContext is an attempt's context under ctx: limited to h.timeout
// when that ends before ctx's deadline.
func (h *sentHead) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if h.timeout != 0 && beforeDeadline(time.Now().Add(h.timeout), ctx) {
		return context.WithTimeout(ctx, h.timeout)
	}
	return ctx, func() {}
}

// beforeDeadline reports whether t is before ctx's deadline, if it has one.
func beforeDeadline(t time.Time, ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return !ok || t.Before(d)
}

// shouldRetry is the SDK's rule: no reply (a connection error), the
// upstream's x-should-retry, else 408, 409, 429 and 5xx.
func shouldRetry(res *http.Response) bool {
	if res == nil {
		return true
	}
	if v, ok := retryHeader(res); ok {
		return v
	}
	return res.StatusCode == http.StatusRequestTimeout || res.StatusCode == http.StatusConflict ||
		res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= http.StatusInternalServerError
}

func retryHeader(res *http.Response) (retry, ok bool) {
	if res == nil {
		return false, false
	}
	switch res.Header.Get("x-should-retry") {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// retryDelay is the SDK's wait before attempt retry+1: what the upstream
// asks for (retry-after-ms, retry-after in seconds or as an RFC 1123
// date), else half a second doubled per retry up to 8 s, less up to a
// quarter of jitter.
func retryDelay(res *http.Response, retry int) time.Duration {
	if res != nil {
		if v := res.Header.Get("Retry-After-Ms"); v != "" {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return max(0, time.Duration(f*float64(time.Millisecond)))
			}
		}
		if v := res.Header.Get("Retry-After"); v != "" {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return max(0, time.Duration(f*float64(time.Second)))
			}
			if t, err := time.Parse(time.RFC1123, v); err == nil {
				return max(0, time.Until(t))
			}
		}
	}
	delay := min(time.Duration(0.5*float64(time.Second)*math.Pow(2, float64(retry))), 8*time.Second)
	return delay - time.Duration(rand.Int64N(int64(delay/4)))
}

// readBody reads res's body whole and closes it, as the SDK does.
func readBody(res *http.Response) ([]byte, error) {
	if res.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("error reading response body: %w", err)
	}
	return b, nil
}

func closeBody(res *http.Response) {
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
}

// apiError is the SDK's error for an error status: the upstream's error
// JSON read into an *sdk.Error, or the JSON error when it is none.
func apiError(req *http.Request, res *http.Response, body []byte) error {
	res.Body = io.NopCloser(bytes.NewReader(body))
	e := &sdk.Error{Request: req, Response: res, StatusCode: res.StatusCode,
		RequestID: res.Header.Get("request-id"), WorkspaceID: res.Header.Get("anthropic-workspace-id")}
	if err := e.UnmarshalJSON(body); err != nil {
		return err
	}
	return e
}
