package upstream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestDoerFollowsRedirectsAndReportsAsClient: the transport-only doer
// answers as http.Client would: a 307 is followed with the body sent
// again, a connection error reads the same.
func TestDoerFollowsRedirectsAndReportsAsClient(t *testing.T) {
	var old atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/old" {
			old.Add(1)
			http.Redirect(w, r, "/v1/messages", http.StatusTemporaryRedirect)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append([]byte(r.URL.Path+" "), b...))
	}))
	defer srv.Close()
	c := &http.Client{Transport: NewTransport()}
	d := Doer(c)
	if _, ok := d.(*http.Client); ok {
		t.Fatal("a default client is used whole")
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/old", strings.NewReader(`{"a":1}`))
	res, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != `/v1/messages {"a":1}` {
		t.Fatalf("redirect: %d %q", res.StatusCode, b)
	}
	if n := old.Load(); n != 2 {
		t.Fatalf("the redirecting address was asked %d times, want 2 (the doer, then the client it hands the redirect to)", n)
	}

	dead := "http://" + srv.Listener.Addr().String()
	srv.Close()
	c = &http.Client{Transport: NewTransport()} // no kept-alive connection
	req, _ = http.NewRequest("POST", dead+"/v1/messages", strings.NewReader(`{}`))
	_, got := Doer(c).Do(req)
	req, _ = http.NewRequest("POST", dead+"/v1/messages", strings.NewReader(`{}`))
	_, want := c.Do(req)
	if got == nil || want == nil || got.Error() != want.Error() {
		t.Fatalf("connection error %v, http.Client's %v", got, want)
	}
	if _, ok := Doer(&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}).(*http.Client); !ok {
		t.Fatal("a client with its own redirect rule is not used whole")
	}
}

// TestResolveModel: a request's own model is kept; none, or "default",
// is the configured one.
func TestResolveModel(t *testing.T) {
	for _, c := range []struct{ requested, want string }{
		{"", "configured"},
		{"default", "configured"},
		{"claude-x", "claude-x"},
	} {
		if got := ResolveModel(c.requested, "configured"); got != c.want {
			t.Errorf("ResolveModel(%q) = %q, want %q", c.requested, got, c.want)
		}
	}
}
