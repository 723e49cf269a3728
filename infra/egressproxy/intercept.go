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
	// http.ReadRequest and ReadResponse put no bound on a header: each is
	// read under maxHeaderBytes, as the proxy's own server reads the
	// sandbox's requests, and the body after it without one.
	dl, ul := &headerLimit{r: down, n: -1}, &headerLimit{r: upTLS, n: -1}
	cr, ur := bufio.NewReader(dl), bufio.NewReader(ul)
	for {
		// The wait for the sandbox's next request is the tunnel's idle
		// time; the request's body is read without a bound.
		_ = client.SetReadDeadline(time.Now().Add(p.cfg.TunnelIdleTimeout))
		dl.n = maxHeaderBytes
		req, err := http.ReadRequest(cr)
		dl.n = -1
		_ = client.SetReadDeadline(time.Time{})
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
		readResponse := func() (*http.Response, error) {
			ul.n = maxHeaderBytes
			_ = upTLS.SetReadDeadline(time.Now().Add(p.cfg.ResponseHeaderTimeout))
			defer func() { ul.n = -1; _ = upTLS.SetReadDeadline(time.Time{}) }()
			return http.ReadResponse(ur, req)
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
// a protocol switch (a WebSocket), until both end.
func splice(down net.Conn, dr *bufio.Reader, up net.Conn, ur *bufio.Reader) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, dr); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, ur); closeWrite(down); done <- struct{}{} }()
	<-done
	<-done
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
