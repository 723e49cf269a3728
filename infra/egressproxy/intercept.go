package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"threadbox/domain/egress"
)

// intercept answers CONNECT to a host an org bound secrets to: it
// terminates the sandbox's TLS with a certificate of the install's CA for
// that host, opens its own TLS to the host (verified against the
// upstream roots), and carries HTTP/1.1 requests across, setting each
// secret's header on the way out. The secret's value exists only in the
// threadbox process and on the wire to the host.
func (p *Proxy) intercept(w http.ResponseWriter, up *countingConn, rec *egress.Record, secrets []egress.Secret) {
	defer up.Close()
	client, brw, ok := establish(w)
	if !ok {
		return
	}
	defer client.Close()
	leaf, err := p.cfg.CA.leaf(rec.Host)
	if err != nil {
		rec.Reason = err.Error()
		return
	}
	down := tls.Server(&bufferedConn{Conn: client, r: brw.Reader}, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	err = down.HandshakeContext(ctx)
	cancel()
	if err != nil {
		rec.Reason = "the sandbox's TLS handshake failed: " + err.Error()
		return
	}
	if sni := down.ConnectionState().ServerName; sni != "" && !sameHost(sni, rec.Host) {
		rec.Allowed, rec.Rule = false, RuleSNIMismatch
		rec.Reason = "the TLS handshake names " + sni + ", not " + rec.Host + " the tunnel was opened to"
		return
	}
	upTLS := tls.Client(up, &tls.Config{
		ServerName: rec.Host,
		RootCAs:    p.cfg.UpstreamRoots,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	ctx, cancel = context.WithTimeout(context.Background(), DefaultDialTimeout)
	err = upTLS.HandshakeContext(ctx)
	cancel()
	if err != nil {
		rec.Reason = "upstream TLS: " + err.Error()
		writeStatus(down, http.StatusBadGateway, "threadbox egress: "+rec.Host+" did not present a trusted certificate")
		return
	}
	// A body that stalls mid-way, either way, and a switched protocol
	// gone silent are bounded as a plain tunnel is: a whole idle period
	// with no byte to or from the host closes both sides.
	watch := watchIdle(client, up, p.cfg.TunnelIdleTimeout)
	defer func() {
		if watch.stop() {
			rec.Reason = fmt.Sprintf("closed after %v with no traffic", p.cfg.TunnelIdleTimeout)
		}
	}()
	// http.ReadRequest and ReadResponse put no bound on a header: each is
	// read under maxHeaderBytes, as the proxy's own server reads the
	// sandbox's requests, and the body after it without one.
	dl, ul := &headerLimit{r: down, n: -1}, &headerLimit{r: upTLS, n: -1}
	cr, ur := bufio.NewReader(dl), bufio.NewReader(ul)
	for {
		// The wait for the sandbox's next request is the tunnel's idle
		// time, under a deadline of its own.
		var req *http.Request
		watch.bounded(func() {
			_ = client.SetReadDeadline(time.Now().Add(p.cfg.TunnelIdleTimeout))
			dl.n = maxHeaderBytes
			req, err = http.ReadRequest(cr)
			dl.n = -1
			_ = client.SetReadDeadline(time.Time{})
		})
		if err != nil && isTimeout(err) {
			rec.Reason = fmt.Sprintf("closed after %v with no traffic", p.cfg.TunnelIdleTimeout)
			return
		}
		if errors.Is(err, errHeaderTooLarge) {
			rec.Reason = "the sandbox sent a request header over the bound"
			writeStatus(down, http.StatusRequestHeaderFieldsTooLarge, "threadbox egress: the request header is too large")
			return
		}
		if err != nil {
			return
		}
		for _, name := range []string{"Proxy-Authorization", "Proxy-Connection"} {
			req.Header.Del(name)
		}
		for _, s := range secrets {
			req.Header.Set(s.Header, s.Value)
		}
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			// The proxy sends the body on at once, so it answers the
			// client's wait itself.
			req.Header.Del("Expect")
			if _, err := io.WriteString(down, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		if err := req.Write(upTLS); err != nil {
			return
		}
		readResponse := func() (resp *http.Response, err error) {
			watch.bounded(func() {
				ul.n = maxHeaderBytes
				_ = upTLS.SetReadDeadline(time.Now().Add(p.cfg.ResponseHeaderTimeout))
				resp, err = http.ReadResponse(ur, req)
				ul.n = -1
				_ = upTLS.SetReadDeadline(time.Time{})
			})
			return resp, err
		}
		resp, err := readResponse()
		for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			if err = resp.Write(down); err == nil {
				resp, err = readResponse()
			}
		}
		if err != nil && isTimeout(err) {
			rec.Reason = "upstream: " + err.Error()
			writeStatus(down, http.StatusGatewayTimeout, fmt.Sprintf("threadbox egress: %s did not answer within %v", rec.Host, p.cfg.ResponseHeaderTimeout))
			return
		}
		if err != nil {
			writeStatus(down, http.StatusBadGateway, "threadbox egress: "+rec.Host+" did not answer")
			return
		}
		werr := resp.Write(down)
		_ = resp.Body.Close()
		if werr != nil {
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			splice(down, cr, upTLS, ur)
			return
		}
		if req.Close || resp.Close {
			return
		}
	}
}

// splice copies both ways between the sandbox's side and the host's after
// a protocol switch (a WebSocket), until both end (or the tunnel's idle
// watch closes them).
func splice(down net.Conn, dr *bufio.Reader, up net.Conn, ur *bufio.Reader) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, dr); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, ur); closeWrite(down); done <- struct{}{} }()
	<-done
	<-done
}

// idleWatch closes both sides of an intercepted tunnel once a whole idle
// period passed with no byte written to or read from the host, which is
// every byte the tunnel carries either way: a stalled body stops both.
// Waits with a bound of their own (the sandbox's next request, an
// answer's header) are left to that bound: a period in which one ran is
// not idle. As for a plain tunnel, a silent tunnel ends between one and
// two idle periods after its last byte.
type idleWatch struct {
	client  net.Conn
	up      *countingConn
	waits   atomic.Int64 // bounded waits begun or ended
	waiting atomic.Bool
	idled   atomic.Bool
	done    chan struct{}
	exited  chan struct{}
}

// watchIdle starts watching the tunnel between client and up.
func watchIdle(client net.Conn, up *countingConn, idle time.Duration) *idleWatch {
	w := &idleWatch{client: client, up: up, done: make(chan struct{}), exited: make(chan struct{})}
	go w.run(idle, w.moved())
	return w
}

// moved is what the tunnel carried so far, both ways.
func (w *idleWatch) moved() int64 { return w.up.sent.Load() + w.up.received.Load() }

func (w *idleWatch) run(idle time.Duration, last int64) {
	defer close(w.exited)
	tick := time.NewTicker(idle)
	defer tick.Stop()
	var lastWaits int64
	for {
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
		n, waits := w.moved(), w.waits.Load()
		if n != last || waits != lastWaits || w.waiting.Load() {
			last, lastWaits = n, waits
			continue
		}
		w.idled.Store(true)
		_ = w.client.Close()
		_ = w.up.Close()
		return
	}
}

// bounded runs wait, a wait under a deadline of its own, outside the
// watch.
func (w *idleWatch) bounded(wait func()) {
	w.waits.Add(1)
	w.waiting.Store(true)
	defer func() {
		w.waiting.Store(false)
		w.waits.Add(1)
	}()
	wait()
}

// stop ends the watch and reports whether it closed the tunnel as idle.
func (w *idleWatch) stop() bool {
	close(w.done)
	<-w.exited
	return w.idled.Load()
}

// writeStatus answers the sandbox's request with a status and one line.
func writeStatus(c net.Conn, status int, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Close: true,
		Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, ContentLength: int64(len(msg) + 1),
		Body: io.NopCloser(strings.NewReader(msg + "\n"))}
	_ = resp.Write(c)
}

// maxHeaderBytes bounds the header of a request or an answer carried
// across an intercepted tunnel: http.DefaultMaxHeaderBytes, the bound of
// the proxy's own server.
const maxHeaderBytes = http.DefaultMaxHeaderBytes

var errHeaderTooLarge = errors.New("header over the bound")

// headerLimit reads r, at most n more bytes while n is not negative (a
// header is being read), without a bound while it is.
type headerLimit struct {
	r io.Reader
	n int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errHeaderTooLarge
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	return n, err
}

// bufferedConn is the sandbox's connection read through the buffer the
// HTTP server filled before the hijack.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
