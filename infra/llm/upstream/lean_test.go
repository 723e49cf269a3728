package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countConns counts the connections srv accepts.
func countConns(srv *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func post(t *testing.T, d interface {
	Do(*http.Request) (*http.Response, error)
}, ctx context.Context, u, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "k1")
	req.Header.Set("Content-Type", "application/json")
	res, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// TestLeanDoer: replies whole and streamed come back as sent, headers and
// body go up as given, and one kept-alive connection carries them all
// without a goroutine of its own on the client side.
func TestLeanDoer(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Request-Id", "req_1")
		w.Header().Set("Retry-After-Ms", "5")
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		fmt.Fprintf(w, "%s|%s|%s|%d|%s|%s", r.Method, r.Header.Get("X-Api-Key"), r.Header.Get("Content-Type"), r.ContentLength, r.UserAgent(), b)
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	d := Doer(&http.Client{Transport: NewTransport()})
	if _, ok := d.(*leanDoer); !ok {
		t.Fatalf("Doer of a plain client is %T", d)
	}
	for i := range 10 {
		res, got := post(t, d, context.Background(), srv.URL+"/v1/messages", fmt.Sprintf(`{"n":%d}`, i))
		want := fmt.Sprintf(`POST|k1|application/json|%d|Go-http-client/1.1|{"n":%d}`, len(fmt.Sprintf(`{"n":%d}`, i)), i)
		if res.StatusCode != 200 || got != want || res.Header.Get("Request-Id") != "req_1" || res.Header.Get("retry-after-ms") != "5" {
			t.Fatalf("reply %d %q %v, want %q", res.StatusCode, got, res.Header, want)
		}
		res, got = post(t, d, context.Background(), srv.URL+"/stream", "{}")
		if got != "data: 0\n\ndata: 1\n\ndata: 2\n\n" || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1", n)
	}

	// Four connections at once, then idle: each costs the server one
	// goroutine and the client none (net/http's transport keeps two).
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	release := make(chan struct{})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	for range 4 {
		wg.Go(func() { post(t, d, context.Background(), srv.URL, "{}") })
	}
	for conns.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	if grew := runtime.NumGoroutine() - before; grew > 4 {
		t.Fatalf("%d more goroutines with 4 idle connections, want the server's 4 at most", grew)
	}
}

// rawServer answers each connection with serve.
func rawServer(t *testing.T, serve func(n int, c net.Conn)) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(int(n.Add(1)), c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String(), &n
}

// readRequest reads one request from br, nil at its end.
func readRequest(br *bufio.Reader) *http.Request {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil
	}
	_, _ = io.Copy(io.Discard, r.Body)
	return r
}

// TestLeanSendsAgainOnAStaleConnection: an upstream that closed a
// kept-alive connection without saying so gets the next request on a new
// one, once, as net/http does.
func TestLeanSendsAgainOnAStaleConnection(t *testing.T) {
	var requests atomic.Int32
	u, conns := rawServer(t, func(_ int, c net.Conn) {
		if readRequest(bufio.NewReader(c)) == nil {
			return
		}
		requests.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		// and closes without Connection: close
	})
	d := Doer(&http.Client{Transport: NewTransport()})
	for range 3 {
		time.Sleep(20 * time.Millisecond) // lets the close reach the client
		if _, got := post(t, d, context.Background(), u, "{}"); got != "ok" {
			t.Fatalf("reply %q", got)
		}
	}
	if c, r := conns.Load(), requests.Load(); c != 3 || r != 3 {
		t.Fatalf("%d connections and %d requests, want 3 of each", c, r)
	}
}

// TestLeanCancel: a cancelled context cuts the connection at once, whether
// the upstream has not answered yet or is streaming; the upstream sees it.
func TestLeanCancel(t *testing.T) {
	gone := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server watches the connection once the body is read.
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/stream" {
			for {
				if _, err := io.WriteString(w, "data: x\n\n"); err != nil {
					break
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					gone <- r.URL.Path
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			gone <- r.URL.Path
			return
		}
		<-r.Context().Done()
		gone <- r.URL.Path
	}))
	defer srv.Close()
	d := Doer(&http.Client{Transport: NewTransport()})

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/hang", strings.NewReader("{}"))
	_, err := d.Do(req)
	var ue *url.Error
	if !errors.As(err, &ue) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want a *url.Error of context.Canceled", err)
	}
	waitGone(t, gone, "/hang")

	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/stream", strings.NewReader("{}"))
	res, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(res.Body, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(res.Body); err == nil {
		t.Fatal("stream read on after its context was cancelled")
	}
	_ = res.Body.Close()
	waitGone(t, gone, "/stream")
}

func waitGone(t *testing.T, gone chan string, path string) {
	t.Helper()
	select {
	case p := <-gone:
		if p != path {
			t.Fatalf("upstream saw %s leave, want %s", p, path)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("upstream did not see the client leave %s", path)
	}
}

// TestLeanEarlyCloseIsNotDrained: closing a stream before its end closes
// its connection (a stream may never end) and the next request gets a new
// one; a reply cut short is an error, not a short body.
func TestLeanEarlyCloseIsNotDrained(t *testing.T) {
	u, conns := rawServer(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		for {
			r := readRequest(br)
			if r == nil {
				return
			}
			switch r.URL.Path {
			case "/endless":
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				for {
					if _, err := io.WriteString(c, "9\r\ndata: x\n\n\r\n"); err != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			case "/short":
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cut\":")
				return
			default:
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
	})
	d := Doer(&http.Client{Transport: NewTransport()})
	req, _ := http.NewRequest(http.MethodPost, u+"/endless", strings.NewReader("{}"))
	res, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(res.Body, buf); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { _ = res.Body.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("closing an endless stream did not return")
	}
	if _, got := post(t, d, context.Background(), u+"/ok", "{}"); got != "ok" {
		t.Fatalf("reply %q", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the closed stream's is not reused)", n)
	}

	req, _ = http.NewRequest(http.MethodPost, u+"/short", strings.NewReader("{}"))
	if res, err = d.Do(req); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(res.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading a cut reply: %v, want io.ErrUnexpectedEOF", err)
	}
	_ = res.Body.Close()
}

// TestLeanTLS: an https upstream is reached with the transport's TLS
// settings.
func TestLeanTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	defer srv.Close()
	tr := NewTransport()
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	d := Doer(&http.Client{Transport: tr})
	for range 2 {
		res, got := post(t, d, context.Background(), srv.URL, "{}")
		if got != "HTTP/1.1" || res.TLS == nil {
			t.Fatalf("reply %q, TLS %v", got, res.TLS)
		}
	}
	// Without the test CA the certificate is refused.
	d = Doer(&http.Client{Transport: NewTransport()})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	if _, err := d.Do(req); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want a certificate error", err)
	}
}

// TestLeanLeavesProxiesToTheTransport: a request the transport sends
// through a proxy goes there.
func TestLeanLeavesProxiesToTheTransport(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "via proxy for "+r.URL.String())
	}))
	defer proxy.Close()
	tr := NewTransport()
	pu, _ := url.Parse(proxy.URL)
	tr.Proxy = http.ProxyURL(pu)
	d := Doer(&http.Client{Transport: tr})
	if _, got := post(t, d, context.Background(), "http://upstream.invalid/v1/messages", "{}"); got != "via proxy for http://upstream.invalid/v1/messages" {
		t.Fatalf("reply %q", got)
	}
}

// TestLeanIdleConnectionsClose: a connection that waited in the pool for
// the transport's IdleConnTimeout is closed, and the next request dials.
func TestLeanIdleConnectionsClose(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	var opened, closed atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := NewTransport()
	tr.IdleConnTimeout = 100 * time.Millisecond
	d := Doer(&http.Client{Transport: tr})
	post(t, d, context.Background(), srv.URL, "{}")
	post(t, d, context.Background(), srv.URL, "{}")
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if closed.Load() != 1 || opened.Load() != 1 {
		t.Fatalf("opened %d, closed %d; want the one idle connection closed", opened.Load(), closed.Load())
	}
	if _, got := post(t, d, context.Background(), srv.URL, "{}"); got != "ok" || opened.Load() != 2 {
		t.Fatalf("reply %q after %d connections", got, opened.Load())
	}
}

// TestLeanSkipsInformationalReplies: a 103 before the answer is not the
// answer.
func TestLeanSkipsInformationalReplies(t *testing.T) {
	u, _ := rawServer(t, func(_ int, c net.Conn) {
		if readRequest(bufio.NewReader(c)) == nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")
	})
	d := Doer(&http.Client{Transport: NewTransport()})
	if res, got := post(t, d, context.Background(), u, "{}"); res.StatusCode != 201 || got != "done" {
		t.Fatalf("reply %d %q", res.StatusCode, got)
	}
}
