package upstream

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After-Ms": {"250"}}, 250 * time.Millisecond, true},
		{http.Header{"Retry-After": {"2"}}, 2 * time.Second, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{}, 0, false},
	}
	for _, c := range cases {
		got, ok := RetryAfter(c.h)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: %v %v", c.h, got, ok)
		}
	}
	res := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"120"}}}
	CapRetryAfter(res, time.Minute)
	if res.Header.Get("x-should-retry") != "false" {
		t.Fatal("long retry-after not capped")
	}
	res = &http.Response{StatusCode: 529, Header: http.Header{"Retry-After": {"1"}}}
	CapRetryAfter(res, time.Minute)
	if res.Header.Get("x-should-retry") != "" {
		t.Fatal("short retry-after capped")
	}
	res = &http.Response{StatusCode: 400, Header: http.Header{"Retry-After": {"120"}}}
	CapRetryAfter(res, time.Minute)
	if res.Header.Get("x-should-retry") != "" {
		t.Fatal("non-retryable status touched")
	}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	if c.Retries() != DefaultMaxRetries || c.RetryWait() != DefaultMaxRetryWait || c.Client() == nil {
		t.Fatalf("defaults: %d %v", c.Retries(), c.RetryWait())
	}
	c = Config{MaxRetries: -1, MaxRetryWait: time.Second, HTTPClient: http.DefaultClient}
	if c.Retries() != 0 || c.RetryWait() != time.Second || c.Client() != http.DefaultClient {
		t.Fatalf("set: %d %v", c.Retries(), c.RetryWait())
	}
	if (Config{MaxRetries: 5}).Retries() != 5 {
		t.Fatal("explicit retries")
	}
}
