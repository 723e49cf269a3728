package egressproxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/egress"
	"threadbox/infra/egressproxy"
)

// policies serves one org's policy, which the test changes as an admin
// would.
type policies struct {
	mu  sync.Mutex
	pol egress.Policy
}

func (p *policies) set(on bool, allow ...string) {
	pats, err := egress.ParsePatterns(allow)
	if err != nil {
		panic(err)
	}
	p.mu.Lock()
	p.pol = egress.Policy{On: on, Allow: pats}
	p.mu.Unlock()
}

func (p *policies) EgressPolicy(_ context.Context, containerID string) (egress.Scope, egress.Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if containerID != "cnt_1" {
		return egress.Scope{}, egress.Policy{}, fmt.Errorf("no container %s", containerID)
	}
	return egress.Scope{OrgID: "org_1", UserID: "usr_1", ThreadID: "thr_1", ContainerID: containerID}, p.pol, nil
}

// records keeps what the proxy recorded.
type records struct {
	mu   sync.Mutex
	list []egress.Record
	ch   chan egress.Record
}

func (r *records) Record(rec egress.Record) {
	r.mu.Lock()
	r.list = append(r.list, rec)
	r.mu.Unlock()
	r.ch <- rec
}

// next waits for the next record.
func (r *records) next(t *testing.T) egress.Record {
	t.Helper()
	select {
	case rec := <-r.ch:
		return rec
	case <-time.After(10 * time.Second):
		t.Fatal("no record")
		return egress.Record{}
	}
}

// resolver is the test's DNS: names to loopback addresses, and a
// rebinding name that resolves to an internal address.
type resolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	asked []string
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type rig struct {
	pol   *policies
	recs  *records
	res   *resolver
	proxy *egressproxy.Proxy
	addr  string // the proxy as the sandbox sees it
	port  string // the test servers' port
}

// newRig starts the proxy behind a loopback listener that hands each
// connection to it as the bridge does, naming the container.
func newRig(t *testing.T, cfg egressproxy.Config, srvPort string) *rig {
	t.Helper()
	r := &rig{pol: &policies{}, recs: &records{ch: make(chan egress.Record, 64)}, port: srvPort,
		res: &resolver{names: map[string][]netip.Addr{
			"pypi.test":   {netip.MustParseAddr("127.0.0.1")},
			"other.test":  {netip.MustParseAddr("127.0.0.1")},
			"rebind.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")},
			"inside.test": {netip.MustParseAddr("10.1.2.3")},
		}}}
	var err error
	if cfg.Ceiling, err = egress.NewCeiling([]string{"blocked.test"}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	cfg.Resolver = r.res
	r.proxy = egressproxy.New(r.pol, r.recs, cfg)
	t.Cleanup(func() { r.proxy.Close() })
	r.addr = net.JoinHostPort("127.0.0.1", loopbackHost(t, func(c net.Conn) { r.proxy.Serve(c, "cnt_1") }))
	return r
}

// client goes through the proxy, trusting the test server's certificate
// and naming sni in the handshake ("" names the URL's host).
func (r *rig) client(srv *httptest.Server, sni string) *http.Client {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: r.addr})
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.ServerName = sni
	tr.TLSClientConfig.InsecureSkipVerify = true // the certificate names example.com; the name checked here is the SNI
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func serverPort(t *testing.T, srv *httptest.Server) string {
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

func TestProxy(t *testing.T) {
	body := strings.Repeat("wheel bytes ", 1000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Host-Seen", r.Host)
		io.WriteString(w, body)
	})
	tlsSrv := httptest.NewTLSServer(h)
	defer tlsSrv.Close()
	plain := httptest.NewServer(h)
	defer plain.Close()
	r := newRig(t, egressproxy.Config{}, serverPort(t, tlsSrv))
	tport, pport := serverPort(t, tlsSrv), serverPort(t, plain)

	// get makes one request and closes the client's connections: a
	// connection is recorded when it ends.
	get := func(c *http.Client, u string) (*http.Response, string, error) {
		defer c.CloseIdleConnections()
		resp, err := c.Get(u)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}

	t.Run("egress off refuses and resolves nothing", func(t *testing.T) {
		r.pol.set(false, "pypi.test")
		resp, b, err := get(r.client(plain, ""), "http://pypi.test:"+pport+"/simple/")
		if err != nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(b, "outbound network is off") {
			t.Fatalf("got %v %v %q", resp, err, b)
		}
		if rec := r.recs.next(t); rec.Allowed || rec.Rule != egress.RuleOff || rec.OrgID != "org_1" || rec.ThreadID != "thr_1" || rec.Host != "pypi.test" {
			t.Fatalf("record %+v", rec)
		}
	})

	r.pol.set(true, "pypi.test", "rebind.test", "inside.test", "blocked.test", "127.0.0.1")
	t.Run("https through CONNECT", func(t *testing.T) {
		resp, b, err := get(r.client(tlsSrv, ""), "https://pypi.test:"+tport+"/simple/")
		if err != nil || resp.StatusCode != 200 || b != body {
			t.Fatalf("got %v %v", resp, err)
		}
		rec := r.recs.next(t)
		if !rec.Allowed || rec.Rule != "pypi.test" || rec.Address != "127.0.0.1" || rec.Port != int(mustAtoi(tport)) || rec.BytesDown < int64(len(body)) || rec.BytesUp == 0 || rec.ContainerID != "cnt_1" || rec.UserID != "usr_1" {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("plain http forwarded", func(t *testing.T) {
		resp, b, err := get(r.client(plain, ""), "http://pypi.test:"+pport+"/simple/pkg/")
		if err != nil || resp.StatusCode != 200 || b != body || resp.Header.Get("X-Host-Seen") != "pypi.test:"+pport {
			t.Fatalf("got %v %v", resp, err)
		}
		if rec := r.recs.next(t); !rec.Allowed || rec.BytesDown < int64(len(body)) {
			t.Fatalf("record %+v", rec)
		}
	})
	refused := []struct {
		name, url, rule string
		sni             string
		resolves        bool
		address         string // the address the record names
	}{
		{"a host not listed", "https://other.test:" + tport + "/", egress.RuleNoMatch, "", false, ""},
		{"the operator's deny list", "http://blocked.test:" + pport + "/", "operator-deny:blocked.test", "", false, ""},
		{"a name resolving to a private address", "https://inside.test:" + tport + "/", egress.RulePrivate, "", true, "10.1.2.3"},
		{"a rebinding name with one internal address", "http://rebind.test:" + pport + "/", egress.RulePrivate, "", true, "169.254.169.254"},
		{"an address not allowed", "http://10.0.0.1:" + pport + "/", egress.RuleNoMatch, "", false, "10.0.0.1"},
		{"a TLS name other than the CONNECT host", "https://pypi.test:" + tport + "/", egressproxy.RuleSNIMismatch, "other.test", true, "127.0.0.1"},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			r.res.mu.Lock()
			r.res.asked = nil
			r.res.mu.Unlock()
			c := r.client(tlsSrv, tc.sni)
			resp, _, err := get(c, tc.url)
			if err == nil && resp.StatusCode == 200 {
				t.Fatal("the connection went through")
			}
			rec := r.recs.next(t)
			if rec.Allowed || rec.Rule != tc.rule || rec.Reason == "" || rec.Address != tc.address {
				t.Fatalf("record %+v, want refused by %s at address %q", rec, tc.rule, tc.address)
			}
			r.res.mu.Lock()
			asked := len(r.res.asked)
			r.res.mu.Unlock()
			if (asked > 0) != tc.resolves {
				t.Fatalf("resolver asked %d times; a name the policy refuses must not be resolved", asked)
			}
		})
	}
	t.Run("a policy change applies to the next connection", func(t *testing.T) {
		r.pol.set(true, "other.test")
		resp, _, err := get(r.client(tlsSrv, ""), "https://pypi.test:"+tport+"/")
		if err == nil && resp.StatusCode == 200 {
			t.Fatal("pypi.test still reachable after it left the allowlist")
		}
		if rec := r.recs.next(t); rec.Rule != egress.RuleNoMatch {
			t.Fatalf("record %+v", rec)
		}
		resp, _, err = get(r.client(tlsSrv, ""), "https://other.test:"+tport+"/")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("other.test after it joined the allowlist: %v %v", resp, err)
		}
		r.recs.next(t)
	})
	t.Run("a bare request is refused", func(t *testing.T) {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("got %v %v", resp, err)
		}
		if rec := r.recs.next(t); rec.Rule != egressproxy.RuleBadRequest {
			t.Fatalf("record %+v", rec)
		}
	})
	r.pol.set(true, "pypi.test", "127.0.0.1")
	for _, tc := range []struct{ name, req string }{
		{"a host too long for a name", "CONNECT " + strings.Repeat("a.", 150<<10) + "pypi.test:" + tport + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a name not in ASCII", "CONNECT b\u00fccher.test:" + tport + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a CONNECT naming its target only in Host", "CONNECT /x HTTP/1.1\r\nHost: pypi.test:" + tport + "\r\n\r\n"},
		{"an address with a zone", "GET http://[fe80::1%25lo]:" + pport + "/ HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run("bad target: "+tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("got %v %v", resp, err)
			}
			rec := r.recs.next(t)
			if rec.Allowed || rec.Rule != egressproxy.RuleBadRequest || rec.Host != "" || len(rec.Reason) > 200 {
				t.Fatalf("record %.300v", rec)
			}
		})
	}
	t.Run("an address matches however it is written", func(t *testing.T) {
		resp, b, err := get(r.client(plain, ""), "http://[::ffff:127.0.0.1]:"+pport+"/")
		if err != nil || resp.StatusCode != 200 || b != body {
			t.Fatalf("got %v %v", resp, err)
		}
		if rec := r.recs.next(t); !rec.Allowed || rec.Host != "127.0.0.1" || rec.Rule != "127.0.0.1" {
			t.Fatalf("record %+v", rec)
		}
	})
}

func mustAtoi(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// TestProxyLimits checks the per-sandbox bounds: connections over the
// count are refused with 429, and a download takes at least what the
// bandwidth bound allows (a lower bound, which a slow machine cannot
// break).
func TestProxyLimits(t *testing.T) {
	release := make(chan struct{})
	payload := strings.Repeat("x", 768<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-release
			return
		}
		io.WriteString(w, payload)
	}))
	defer srv.Close()
	defer close(release)
	port := serverPort(t, srv)
	r := newRig(t, egressproxy.Config{MaxConns: 1, BytesPerSecond: 256 << 10}, port)
	r.pol.set(true, "pypi.test")
	c := r.client(srv, "")

	start := time.Now()
	resp, err := c.Get("http://pypi.test:" + port + "/wheel")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if took := time.Since(start); n != int64(len(payload)) || took < 1500*time.Millisecond {
		t.Fatalf("%d bytes in %v: 768 KiB at 256 KiB/s (with a 256 KiB burst) takes 2 s at least", n, took)
	}
	r.recs.next(t)

	held, err := c.Get("http://pypi.test:" + port + "/hold")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Body.Close()
	other := r.client(srv, "")
	resp, err = other.Get("http://pypi.test:" + port + "/wheel")
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second connection: %v %v", resp, err)
	}
	resp.Body.Close()
	if rec := r.recs.next(t); rec.Rule != egressproxy.RuleConnLimit {
		t.Fatalf("record %+v", rec)
	}
}

// silentHost listens on loopback and accepts connections, reading what
// they send and never answering, until the test ends.
func silentHost(t *testing.T) string {
	return loopbackHost(t, func(c net.Conn) { io.Copy(io.Discard, c) })
}

// echoHost listens on loopback and sends back every byte it reads.
func echoHost(t *testing.T) string {
	return loopbackHost(t, func(c net.Conn) { io.Copy(c, c) })
}

// loopbackHost listens on loopback until the test ends, serves each
// connection with serve and closes it, and returns the port.
func loopbackHost(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestProxyResponseHeaderTimeout checks that a forwarded request to a host
// that accepts the connection and never answers gets 504 once the bound
// on the wait for the answer's header passed, instead of holding the
// sandbox's connection and the proxy for as long as the host likes.
func TestProxyResponseHeaderTimeout(t *testing.T) {
	port := silentHost(t)
	r := newRig(t, egressproxy.Config{ResponseHeaderTimeout: 200 * time.Millisecond}, port)
	r.pol.set(true, "pypi.test")
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.addr})}, Timeout: 20 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://pypi.test:" + port + "/simple/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.HasPrefix(string(b), "threadbox egress: pypi.test did not answer within") {
		t.Fatalf("got %d %q", resp.StatusCode, b)
	}
	if rec := r.recs.next(t); !rec.Allowed || !strings.Contains(rec.Reason, "timeout") {
		t.Fatalf("record %+v", rec)
	}
}

// openTunnel opens a CONNECT tunnel through the rig to host:port.
func (r *rig) openTunnel(t *testing.T, host, port string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s:%s HTTP/1.1\r\nHost: %[1]s:%[2]s\r\n\r\n", host, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	return c, br
}

// echo sends one line through a tunnel and reads it back.
func echo(t *testing.T, c net.Conn, br *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := br.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q %v", line, got, err)
	}
}

// TestProxyTunnelIdle checks the idle bound of CONNECT tunnels: a tunnel
// carrying no byte either way for its idle time is closed on both sides,
// while one that keeps carrying bytes for several times as long stays
// open, and is closed once it falls silent. Both ways of copying are
// covered: the kernel's splice, and the copy through the bandwidth bound.
func TestProxyTunnelIdle(t *testing.T) {
	for _, bps := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprintf("%d bytes per second", bps), func(t *testing.T) { testTunnelIdle(t, bps) })
	}
}

func testTunnelIdle(t *testing.T, bps int64) {
	// Long enough that a loaded machine does not stall the active
	// tunnel's lines for a whole period.
	const idle = 2 * time.Second
	port := echoHost(t)
	r := newRig(t, egressproxy.Config{TunnelIdleTimeout: idle, BytesPerSecond: bps}, port)
	r.pol.set(true, "127.0.0.1")

	// waitClosed reads until the proxy closes the tunnel; the deadline
	// only keeps a failing test from hanging.
	waitClosed := func(t *testing.T, c net.Conn, br *bufio.Reader) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		if b, err := br.ReadString('\n'); err != io.EOF {
			t.Fatalf("the idle tunnel is still open: read %q %v", b, err)
		}
		rec := r.recs.next(t)
		if !rec.Allowed || !strings.Contains(rec.Reason, "no traffic") || rec.BytesUp == 0 || rec.BytesDown == 0 {
			t.Fatalf("record %+v", rec)
		}
	}

	t.Run("an idle tunnel is closed", func(t *testing.T) {
		c, br := r.openTunnel(t, "127.0.0.1", port)
		echo(t, c, br, "hello")
		waitClosed(t, c, br)
	})
	t.Run("an active tunnel stays open past its idle time", func(t *testing.T) {
		c, br := r.openTunnel(t, "127.0.0.1", port)
		for i := range 40 { // about 4 idle periods
			echo(t, c, br, fmt.Sprint("line ", i))
			time.Sleep(idle / 10)
		}
		waitClosed(t, c, br)
	})
}
