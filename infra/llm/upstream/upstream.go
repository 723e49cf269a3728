// Package upstream holds what the model adapters share about talking to an
// upstream over HTTP: a kept-alive transport and the retry-after rules.
package upstream

import (
	"io"
	"net"
	"net/http"
	"strconv"
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
