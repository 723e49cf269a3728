package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// leanDoer sends requests on kept-alive HTTP/1.1 connections of its own,
// writing each request (fasthttp's encoder) and reading its reply's head
// (net/http's parser) in the caller's goroutine; the body is read by the
// caller straight from the connection, which goes back to the pool when the
// body was read to its end. net/http's transport hands every request to a
// writer and a reader goroutine per connection; on this machine those
// wake-ups cost a tenth of a Messages API request's CPU. A cancelled
// request context cuts its connection at once, as net/http does.
type leanDoer struct {
	next transportDoer // what fits does not take
	t    *http.Transport

	mu   sync.Mutex
	idle map[string][]*leanConn // by scheme://host:port, most recent last
}

type leanConn struct {
	net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	tls *tls.ConnectionState
	// idle closes the connection once it has waited in the pool for the
	// transport's IdleConnTimeout (a timer, as net/http's, no goroutine).
	idle *time.Timer
}

func (d *leanDoer) Do(req *http.Request) (*http.Response, error) {
	key, ok := d.fits(req)
	if !ok {
		return d.next.Do(req)
	}
	fr := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(fr)
	if err := copyRequest(fr, req); err != nil {
		return nil, asClient(req, err)
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		c, reused, err := d.conn(ctx, key, req.URL)
		if err != nil {
			return nil, asClient(req, err)
		}
		res, err := d.roundTrip(ctx, key, c, fr, req)
		if err == nil {
			return followRedirect(d.next.c, req, res)
		}
		_ = c.Close()
		var stale staleError
		if reused && attempt == 0 && errors.As(err, &stale) && ctx.Err() == nil {
			// The upstream closed a kept-alive connection before reading
			// the request: what net/http also sends again.
			continue
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, asClient(req, err)
	}
}

// fits reports whether req can go on a connection of the doer's own, and
// under which key such connections are kept.
func (d *leanDoer) fits(req *http.Request) (string, bool) {
	if req.URL == nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return "", false
	}
	if req.Method != http.MethodPost && req.Method != http.MethodGet {
		return "", false
	}
	if d.t.Proxy != nil {
		if p, err := d.t.Proxy(req); err != nil || p != nil {
			return "", false
		}
	}
	return req.URL.Scheme + "://" + hostPort(req.URL), true
}

// hostPort is u's host and port, the scheme's default port when u has
// none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// copyRequest writes req's method, address, headers and body into fr.
func copyRequest(fr *fasthttp.Request, req *http.Request) error {
	fr.Header.DisableNormalizing()
	fr.Header.SetMethod(req.Method)
	fr.SetRequestURI(req.URL.String())
	if req.Host != "" {
		fr.Header.SetHost(req.Host)
		fr.UseHostHeader = true
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			if hasAny(v, "\r\n") || hasAny(k, "\r\n: ") {
				return fmt.Errorf("net/http: invalid header field %q", k)
			}
			fr.Header.Add(k, v)
		}
	}
	if req.Header.Get("User-Agent") == "" {
		fr.Header.SetUserAgent("Go-http-client/1.1")
	}
	if req.Body != nil && req.Body != http.NoBody {
		_, err := io.Copy(fr.BodyWriter(), req.Body)
		_ = req.Body.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// hasAny reports whether s holds a byte of set (cheaper than
// strings.ContainsAny for a set this short).
func hasAny(s, set string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(set, s[i]) >= 0 {
			return true
		}
	}
	return false
}

// staleError is a kept-alive connection found closed before any of the
// reply was read.
type staleError struct{ error }

func (e staleError) Unwrap() error { return e.error }

// roundTrip sends fr on c and reads the reply's head; the reply's body
// holds c until it is closed. A cancelled ctx cuts the connection short.
func (d *leanDoer) roundTrip(ctx context.Context, key string, c *leanConn, fr *fasthttp.Request, req *http.Request) (*http.Response, error) {
	cut := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	res, err := exchange(c, fr, req)
	if err != nil {
		cut()
		return nil, err // Do closes c
	}
	res.TLS = c.tls
	res.Body = &leanBody{d: d, key: key, c: c, body: res.Body, cut: cut, keep: !res.Close && !fr.ConnectionClose()}
	return res, nil
}

func exchange(c *leanConn, fr *fasthttp.Request, req *http.Request) (*http.Response, error) {
	if err := fr.Write(c.w); err != nil {
		return nil, staleError{err}
	}
	if err := c.w.Flush(); err != nil {
		return nil, staleError{err}
	}
	if _, err := c.r.Peek(1); err != nil {
		return nil, staleError{err}
	}
	for {
		res, err := http.ReadResponse(c.r, req)
		// An informational reply (103 Early Hints) precedes the answer.
		if err != nil || res.StatusCode < 100 || res.StatusCode >= 200 || res.StatusCode == http.StatusSwitchingProtocols {
			return res, err
		}
	}
}

// leanBody is a reply's body read from its connection. Read to its end, it
// gives the connection back to the pool; closed before, it closes it (a
// stream cut short is never drained to its end).
type leanBody struct {
	d    *leanDoer
	key  string
	c    *leanConn
	body io.ReadCloser
	cut  func() bool
	keep bool

	mu     sync.Mutex
	eof    bool
	closed bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		b.eof = true
		b.mu.Unlock()
	}
	return n, err
}

func (b *leanBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	alive := b.cut() // false once the context cut the connection
	if b.eof && alive && b.keep {
		_ = b.body.Close()
		b.d.put(b.key, b.c)
		return nil
	}
	// Closing the connection first makes the body's close (which reads
	// what is left) end at once.
	_ = b.c.Close()
	_ = b.body.Close()
	return nil
}

// conn takes a kept-alive connection for key, or dials one.
func (d *leanDoer) conn(ctx context.Context, key string, u *url.URL) (*leanConn, bool, error) {
	d.mu.Lock()
	if cs := d.idle[key]; len(cs) > 0 {
		c := cs[len(cs)-1]
		d.idle[key] = cs[:len(cs)-1]
		d.mu.Unlock()
		return c, true, nil
	}
	d.mu.Unlock()
	c, err := d.dial(ctx, u)
	return c, false, err
}

// put gives c back to the pool, or closes it when the pool is full or
// keep-alives are off.
func (d *leanDoer) put(key string, c *leanConn) {
	limit := d.t.MaxIdleConnsPerHost
	if limit <= 0 {
		limit = http.DefaultMaxIdleConnsPerHost
	}
	d.mu.Lock()
	if d.t.DisableKeepAlives || len(d.idle[key]) >= limit {
		d.mu.Unlock()
		_ = c.Close()
		return
	}
	d.idle[key] = append(d.idle[key], c)
	if after := d.t.IdleConnTimeout; after > 0 {
		if c.idle == nil {
			c.idle = time.AfterFunc(after, func() { d.evict(key, c) })
		} else {
			c.idle.Reset(after)
		}
	}
	d.mu.Unlock()
}

// evict closes c if it is still waiting in the pool.
func (d *leanDoer) evict(key string, c *leanConn) {
	d.mu.Lock()
	cs := d.idle[key]
	i := slices.Index(cs, c)
	if i >= 0 {
		d.idle[key] = slices.Delete(cs, i, i+1)
	}
	d.mu.Unlock()
	if i >= 0 {
		_ = c.Close()
	}
}

func (d *leanDoer) dial(ctx context.Context, u *url.URL) (*leanConn, error) {
	host := u.Hostname()
	dial := d.t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	conn, err := dial(ctx, "tcp", hostPort(u))
	if err != nil {
		return nil, err
	}
	c := &leanConn{Conn: conn}
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if d.t.TLSClientConfig != nil {
			cfg = d.t.TLSClientConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if d.t.TLSHandshakeTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d.t.TLSHandshakeTimeout)
			defer cancel()
		}
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		state := tc.ConnectionState()
		c.Conn, c.tls = tc, &state
	}
	c.r = bufio.NewReaderSize(c.Conn, 16<<10)
	c.w = bufio.NewWriterSize(c.Conn, 16<<10)
	return c, nil
}
