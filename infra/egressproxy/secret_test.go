package egressproxy_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/egress"
	"threadbox/infra/egressproxy"
)

// testPKI is a root the test trusts for its upstream servers and a server
// certificate it issues for names.
type testPKI struct {
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
	pool    *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(root)
	return &testPKI{root: root, rootKey: key, pool: pool}
}

func (p *testPKI) server(t *testing.T, h http.Handler, names ...string) *httptest.Server {
	t.Helper()
	return p.serverWith(t, h, nil, names...)
}

// serverWith is server with its http.Server set up by conf before it
// starts.
func (p *testPKI) serverWith(t *testing.T, h http.Handler, conf func(*http.Server), names ...string) *httptest.Server {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.root, &key.PublicKey, p.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	if conf != nil {
		conf(srv.Config)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestProxySecrets(t *testing.T) {
	pki := newTestPKI(t)
	seen := make(chan http.Header, 8)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, "posted "+string(b))
			return
		}
		io.WriteString(w, "hello from "+r.TLS.ServerName)
	})
	srv := pki.server(t, h, "api.test", "plain.test")
	port := serverPort(t, srv)
	dir := t.TempDir()
	ca, err := egressproxy.LoadOrCreateCA(filepath.Join(dir, "egress-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := egressproxy.LoadOrCreateCA(filepath.Join(dir, "egress-ca.pem")); err != nil || string(again.CertPEM()) != string(ca.CertPEM()) {
		t.Fatalf("the CA was not kept: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "egress-ca.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA file mode %v %v", fi, err)
	}
	trust := filepath.Join(dir, "trust")
	if err := egressproxy.WriteTrust(trust, ca); err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(filepath.Join(trust, egressproxy.TrustBundleFile))
	if !strings.HasSuffix(string(bundle), string(ca.CertPEM())) || strings.Contains(string(bundle), "PRIVATE KEY") {
		t.Fatal("the trust bundle does not end with the CA or holds a key")
	}

	r := newRig(t, egressproxy.Config{CA: ca, UpstreamRoots: pki.pool}, port)
	r.res.names["api.test"] = r.res.names["pypi.test"]
	r.res.names["plain.test"] = r.res.names["pypi.test"]
	sec, err := egress.NewSecret("org_1", "api-token", []string{"api.test"}, "authorization", "Bearer s3cret-value", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.pol.set(true, "api.test", "plain.test")
	r.pol.mu.Lock()
	r.pol.pol.Secrets = []egress.Secret{sec}
	r.pol.mu.Unlock()

	// client trusts roots and goes through the proxy.
	client := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: r.addr}),
			TLSClientConfig: &tls.Config{RootCAs: roots},
		}}
	}
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AddCert(ca.Certificate())
	sandboxRoots.AddCert(pki.root)

	t.Run("the secret is added on the wire", func(t *testing.T) {
		c := client(sandboxRoots)
		req, _ := http.NewRequest(http.MethodGet, "https://api.test:"+port+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer forged-by-the-sandbox")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello from api.test" {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
		if got := (<-seen).Values("Authorization"); len(got) != 1 || got[0] != "Bearer s3cret-value" {
			t.Fatalf("the server saw Authorization %q", got)
		}
		if resp.TLS.PeerCertificates[0].Issuer.CommonName != ca.Certificate().Subject.CommonName {
			t.Fatalf("the sandbox's TLS was not terminated by the install's CA: issuer %s", resp.TLS.PeerCertificates[0].Issuer)
		}
		// A second request on the same connection, with a body.
		resp, err = c.Post("https://api.test:"+port+"/v1/echo", "text/plain", strings.NewReader("body bytes"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "posted body bytes" || (<-seen).Get("Authorization") != "Bearer s3cret-value" {
			t.Fatalf("second request: %q", b)
		}
		c.CloseIdleConnections()
		rec := r.recs.next(t)
		if !rec.Allowed || rec.Rule != "api.test secret:api-token" || rec.BytesUp == 0 || rec.BytesDown == 0 {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("a host without a secret tunnels end to end", func(t *testing.T) {
		c := client(pki.pool) // the sandbox would not trust a certificate of the proxy's here
		resp, err := c.Get("https://plain.test:" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.CloseIdleConnections()
		if string(b) != "hello from plain.test" || resp.TLS.PeerCertificates[0].Issuer.CommonName != "test upstream root" {
			t.Fatalf("got %q from %s", b, resp.TLS.PeerCertificates[0].Issuer)
		}
		if got := (<-seen).Get("Authorization"); got != "" {
			t.Fatalf("a secret went to a host it is not bound to: %q", got)
		}
		if rec := r.recs.next(t); !rec.Allowed || rec.Rule != "plain.test" {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("an upstream the proxy does not trust gets no secret", func(t *testing.T) {
		other := newTestPKI(t).server(t, h, "api.test")
		r2 := newRig(t, egressproxy.Config{CA: ca, UpstreamRoots: pki.pool}, serverPort(t, other))
		r2.res.names["api.test"] = r2.res.names["pypi.test"]
		r2.pol.set(true, "api.test")
		r2.pol.mu.Lock()
		r2.pol.pol.Secrets = []egress.Secret{sec}
		r2.pol.mu.Unlock()
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r2.addr}), TLSClientConfig: &tls.Config{RootCAs: sandboxRoots}}}
		resp, err := c.Get("https://api.test:" + serverPort(t, other) + "/")
		if err == nil {
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("got %d", resp.StatusCode)
		}
		select {
		case hd := <-seen:
			t.Fatalf("the untrusted server was sent a request: %v", hd)
		default:
		}
		if rec := r2.recs.next(t); !strings.HasPrefix(rec.Reason, "upstream TLS") {
			t.Fatalf("record %+v", rec)
		}
	})
}

// TestProxySecretsHeaderBound checks that a request carried across an
// intercepted tunnel is read under the same header bound as the proxy's
// own requests: a larger one is refused with 431 and never reaches the
// host, however much the host would accept.
func TestProxySecretsHeaderBound(t *testing.T) {
	pki := newTestPKI(t)
	reached := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		io.WriteString(w, "ok")
	})
	srv := pki.serverWith(t, h, func(s *http.Server) { s.MaxHeaderBytes = 8 << 20 }, "api.test")
	port := serverPort(t, srv)
	r, roots := secretRig(t, pki, port, egressproxy.Config{})
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.addr}), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer c.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, "https://api.test:"+port+"/", nil)
	req.Header.Set("X-Filler", strings.Repeat("a", 2<<20))
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 2 MiB header: got %d, want 431", resp.StatusCode)
		}
	}
	select {
	case <-reached:
		t.Fatal("a request over the header bound reached the host")
	default:
	}
	if rec := r.recs.next(t); !strings.Contains(rec.Reason, "header") {
		t.Fatalf("record %+v", rec)
	}
}

// secretRig is a proxy with its own CA, cfg's limits, the test PKI's roots
// upstream, and a policy that allows api.test (the host at port) and adds
// an org secret's authorization header to it; roots trust the proxy's CA.
func secretRig(t *testing.T, pki *testPKI, port string, cfg egressproxy.Config) (*rig, *x509.CertPool) {
	t.Helper()
	ca, err := egressproxy.LoadOrCreateCA(filepath.Join(t.TempDir(), "egress-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.CA, cfg.UpstreamRoots = ca, pki.pool
	r := newRig(t, cfg, port)
	r.res.names["api.test"] = r.res.names["pypi.test"]
	sec, err := egress.NewSecret("org_1", "api-token", []string{"api.test"}, "authorization", "Bearer s3cret-value", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.pol.set(true, "api.test")
	r.pol.mu.Lock()
	r.pol.pol.Secrets = []egress.Secret{sec}
	r.pol.mu.Unlock()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	return r, roots
}

// TestProxySecretsTimeouts checks the time limits of a tunnel the proxy
// terminates for a secret: a host that never answers a request gets the
// sandbox a 504 after the bound on the answer's header, and a connection
// that sends no next request for the idle time is closed.
func TestProxySecretsTimeouts(t *testing.T) {
	pki := newTestPKI(t)
	stop := make(chan struct{})
	srv := pki.server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			<-stop
		}
		io.WriteString(w, "ok\n")
	}), "api.test")
	defer close(stop)
	port := serverPort(t, srv)
	r, roots := secretRig(t, pki, port, egressproxy.Config{
		ResponseHeaderTimeout: 200 * time.Millisecond, TunnelIdleTimeout: 300 * time.Millisecond})

	// open makes a tunnel to api.test and the sandbox's TLS inside it.
	open := func(t *testing.T) (*tls.Conn, *bufio.Reader) {
		c, br := r.openTunnel(t, "api.test", port)
		if br.Buffered() > 0 {
			t.Fatal("bytes after the CONNECT answer")
		}
		tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: roots})
		return tc, bufio.NewReader(tc)
	}
	get := func(t *testing.T, tc *tls.Conn, br *bufio.Reader, path string) (*http.Response, string) {
		t.Helper()
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", path, port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	t.Run("a host that never answers", func(t *testing.T) {
		tc, br := open(t)
		tc.SetReadDeadline(time.Now().Add(15 * time.Second))
		resp, b := get(t, tc, br, "/hang")
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.HasPrefix(b, "threadbox egress: api.test did not answer within") {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
		if rec := r.recs.next(t); !rec.Allowed || !strings.Contains(rec.Reason, "timeout") {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("an idle connection is closed", func(t *testing.T) {
		tc, br := open(t)
		tc.SetReadDeadline(time.Now().Add(15 * time.Second))
		if resp, b := get(t, tc, br, "/"); resp.StatusCode != 200 || b != "ok\n" {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
		if b, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("the idle connection is still open: read %q %v", b, err)
		}
		if rec := r.recs.next(t); !rec.Allowed || !strings.Contains(rec.Reason, "no traffic") {
			t.Fatalf("record %+v", rec)
		}
	})
}

// TestProxySecretsStalls checks the idle bound inside a tunnel the proxy
// terminates for a secret: a request body the sandbox stops sending, an
// answer's body the host stops sending and a WebSocket gone silent each
// close the tunnel once its idle time passed with no byte either way,
// while a WebSocket that keeps carrying lines stays open past it.
func TestProxySecretsStalls(t *testing.T) {
	pki := newTestPKI(t)
	stop := make(chan struct{})
	srv := pki.server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "read %d bytes\n", len(b))
		case "/download":
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "ten bytes\n")
			w.(http.Flusher).Flush()
			<-stop
		case "/ws":
			c, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			io.Copy(c, brw) // echoes every line
		}
	}), "api.test")
	defer close(stop)
	port := serverPort(t, srv)

	// open makes a tunnel to api.test through r and the sandbox's TLS
	// inside it; the read deadline only keeps a failing test from hanging.
	open := func(t *testing.T, r *rig, roots *x509.CertPool) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, _ := r.openTunnel(t, "api.test", port)
		tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: roots})
		tc.SetReadDeadline(time.Now().Add(15 * time.Second))
		return tc, bufio.NewReader(tc)
	}
	// closed checks that err ended a read because the proxy closed the
	// tunnel, and that the record says so.
	closed := func(t *testing.T, r *rig, err error) {
		t.Helper()
		if err == nil || isTimeout(err) {
			t.Fatalf("the stalled tunnel is still open: %v", err)
		}
		if rec := r.recs.next(t); !rec.Allowed || !strings.Contains(rec.Reason, "no traffic") {
			t.Fatalf("record %+v", rec)
		}
	}
	upgrade := func(t *testing.T, tc *tls.Conn, br *bufio.Reader) {
		t.Helper()
		fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: api.test:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
	}

	r, roots := secretRig(t, pki, port, egressproxy.Config{TunnelIdleTimeout: 300 * time.Millisecond})
	t.Run("a request body that stalls", func(t *testing.T) {
		tc, br := open(t, r, roots)
		fmt.Fprintf(tc, "POST /upload HTTP/1.1\r\nHost: api.test:%s\r\nContent-Length: 100\r\n\r\nten bytes\n", port)
		_, err := br.ReadByte()
		closed(t, r, err)
	})
	t.Run("an answer's body that stalls", func(t *testing.T) {
		tc, br := open(t, r, roots)
		fmt.Fprintf(tc, "GET /download HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v", resp, err)
		}
		b, err := io.ReadAll(resp.Body)
		if string(b) != "ten bytes\n" {
			t.Fatalf("body %q", b)
		}
		closed(t, r, err)
	})
	t.Run("a silent WebSocket", func(t *testing.T) {
		tc, br := open(t, r, roots)
		upgrade(t, tc, br)
		echo(t, tc, br, "hello")
		_, err := br.ReadByte()
		closed(t, r, err)
	})
	t.Run("an active WebSocket stays open past its idle time", func(t *testing.T) {
		// Long enough that a loaded machine does not stall the lines for
		// a whole period.
		const idle = time.Second
		r, roots := secretRig(t, pki, port, egressproxy.Config{TunnelIdleTimeout: idle})
		tc, br := open(t, r, roots)
		upgrade(t, tc, br)
		for i := range 25 { // about 2.5 idle periods
			echo(t, tc, br, fmt.Sprint("line ", i))
			time.Sleep(idle / 10)
		}
		_, err := br.ReadByte()
		closed(t, r, err)
	})
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
