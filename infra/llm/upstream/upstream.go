// Package upstream holds what the model adapters share about talking to an
// upstream over HTTP: a kept-alive transport and the retry-after rules.
package upstream

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// NewTransport returns an HTTP transport tuned for many requests to one
// upstream: kept-alive connections, a bounded dial.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// RetryAfter reads retry-after-ms or retry-after (seconds or a date).
func RetryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("retry-after")
	if v == "" {
		return 0, false
	}
	if sec, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(sec * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t), true
	}
	return 0, false
}

// CapRetryAfter marks a retryable answer (429 or 5xx) as not to be retried
// when the upstream asks to wait longer than limit, so a request fails fast
// instead of hanging; the official SDKs honour x-should-retry.
func CapRetryAfter(res *http.Response, limit time.Duration) {
	if res == nil || (res.StatusCode != http.StatusTooManyRequests && res.StatusCode < 500) {
		return
	}
	if d, ok := RetryAfter(res.Header); ok && d > limit {
		res.Header.Set("x-should-retry", "false")
	}
}

// Middleware returns the request middleware of both SDKs (their
// option.Middleware): every answer is passed through CapRetryAfter with
// limit and DrainOnClose.
func Middleware(limit time.Duration) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if err == nil {
			CapRetryAfter(res, limit)
			DrainOnClose(res)
		}
		return res, err
	}
}

// DrainOnClose makes closing the response body first read what is left of
// it (a little), so a stream that ended at its last event still hands its
// kept-alive connection back for reuse.
func DrainOnClose(res *http.Response) {
	if res != nil && res.Body != nil {
		res.Body = drainCloser{res.Body}
	}
}

type drainCloser struct{ io.ReadCloser }

func (d drainCloser) Close() error {
	_, _ = io.Copy(io.Discard, io.LimitReader(d.ReadCloser, 4<<10))
	return d.ReadCloser.Close()
}

// DefaultMaxRetries is how often a failed request is retried (429, 408,
// 409, 5xx, or a connection error) before a stream starts.
const DefaultMaxRetries = 3

// DefaultMaxRetryWait is the longest retry-after waited for by default.
const DefaultMaxRetryWait = 30 * time.Second

// Config configures a model adapter's connection to its upstream.
type Config struct {
	BaseURL    string // the upstream's address; each adapter says what it expects
	APIKey     string
	Model      string // what "default" (or an empty model) resolves to
	MaxRetries int    // 0 means DefaultMaxRetries; negative disables retries
	// MaxRetryWait is the longest retry-after the adapter waits for; a
	// longer one fails at once. 0 means DefaultMaxRetryWait.
	MaxRetryWait time.Duration
	// HTTPClient, when nil, is a keep-alive client owned by the adapter.
	HTTPClient *http.Client
}

// ResolveModel returns the model a request names, or configured (a
// Config's Model) where it names none or "default".
func ResolveModel(requested, configured string) string {
	if requested == "" || requested == "default" {
		return configured
	}
	return requested
}

// Client returns the configured HTTP client, or a new kept-alive one.
func (c Config) Client() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return &http.Client{Transport: NewTransport()}
}

// Retries returns how often to retry.
func (c Config) Retries() int {
	switch {
	case c.MaxRetries == 0:
		return DefaultMaxRetries
	case c.MaxRetries < 0:
		return 0
	}
	return c.MaxRetries
}

// RetryWait returns the longest retry-after to wait for.
func (c Config) RetryWait() time.Duration {
	if c.MaxRetryWait <= 0 {
		return DefaultMaxRetryWait
	}
	return c.MaxRetryWait
}

// Doer returns what sends the adapter's requests through c. When c follows
// redirects as http.Client does by default and has no cookie jar or time
// limit, and its transport is an *http.Transport, that is a client of
// threadbox's own over the transport's dialer and TLS settings (see
// leanDoer): it skips http.Client's copy of each request's headers for
// redirects (a tenth of what a Messages API request allocates) and the
// transport's two goroutines per connection. A request through a proxy
// goes through the transport alone; any other client is used as it is. A
// redirect, which model APIs do not send, is followed by c with the
// request sent again.
func Doer(c *http.Client) interface {
	Do(*http.Request) (*http.Response, error)
} {
	if c.CheckRedirect != nil || c.Jar != nil || c.Timeout != 0 {
		return c
	}
	t, ok := c.Transport.(*http.Transport)
	if c.Transport == nil {
		t, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok {
		return transportDoer{c}
	}
	return &leanDoer{next: transportDoer{c}, t: t, idle: map[string][]*leanConn{}}
}

type transportDoer struct{ c *http.Client }

func (d transportDoer) Do(req *http.Request) (*http.Response, error) {
	rt := d.c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	res, err := rt.RoundTrip(req)
	if err != nil {
		return nil, asClient(req, err)
	}
	return followRedirect(d.c, req, res)
}

// followRedirect answers res as http.Client would: a redirect with a
// Location is followed by c, with req sent again (its body from GetBody);
// any other reply is res.
func followRedirect(c *http.Client, req *http.Request, res *http.Response) (*http.Response, error) {
	switch res.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return res, nil
	}
	if res.Header.Get("Location") == "" || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
		return res, nil // as http.Client answers it
	}
	_ = res.Body.Close()
	again := req.Clone(req.Context())
	if req.GetBody != nil {
		var err error
		if again.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	return c.Do(again)
}

// asClient reports err as http.Client does.
func asClient(req *http.Request, err error) error {
	op := "Post"
	if req.Method != http.MethodPost {
		op = req.Method[:1] + strings.ToLower(req.Method[1:])
	}
	return &url.Error{Op: op, URL: req.URL.String(), Err: err}
}

// PutSampling copies the sampling settings a request set into a vendor's
// request body: temperature and top_p under their names in both vendors'
// APIs, the stop sequences under stopKey ("stop_sequences" in Anthropic's,
// "stop" in OpenAI's). A setting left unset stays out, so the upstream's
// default applies.
func PutSampling(out map[string]any, temperature, topP *float64, stop []string, stopKey string) {
	if temperature != nil {
		out["temperature"] = *temperature
	}
	if topP != nil {
		out["top_p"] = *topP
	}
	if len(stop) > 0 {
		out[stopKey] = stop
	}
}
