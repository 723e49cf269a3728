// Package egressproxy is the egress proxy of sandboxes: an HTTP forward
// proxy with CONNECT that serves the connections the in-sandbox bridge
// carries from a sandbox's loopback port (app/bridge), so a sandbox reaches
// the hosts its org allows without a route or DNS of its own. Each
// connection is decided by domain/egress.Decide on the policy in force when
// it is asked for; the proxy resolves names itself, checks every address,
// and dials only addresses it checked (no DNS rebinding); a CONNECT tunnel
// carrying TLS must name the CONNECT host in its ClientHello. Every
// connection, allowed or refused, is handed to the Recorder.
package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"threadbox/domain/egress"
)

// Policies returns, for a container, its scope and its org's egress policy
// as in force now (app/egressgate.Gate, which caches it for a few seconds).
type Policies interface {
	EgressPolicy(ctx context.Context, containerID string) (egress.Scope, egress.Policy, error)
}

// Recorder receives the record of every connection, allowed or refused,
// once it is over; it must not block.
type Recorder interface {
	Record(r egress.Record)
}

// Resolver resolves host names (net.Resolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Defaults of Config.
const (
	DefaultMaxConns    = 32
	DefaultDialTimeout = 10 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for the header of a
	// host's answer to a request the proxy forwards.
	DefaultResponseHeaderTimeout = 60 * time.Second
	// DefaultTunnelIdleTimeout closes a tunnel over which no byte passed
	// either way for that long.
	DefaultTunnelIdleTimeout = 10 * time.Minute
	// helloTimeout bounds the wait for a tunnel's first bytes (the TLS
	// ClientHello) after the proxy answered CONNECT.
	helloTimeout = 10 * time.Second
)

// Rules named in records of connections refused by the proxy itself,
// besides those of egress.Decide.
const (
	RuleSNIMismatch = "sni-mismatch"
	RuleConnLimit   = "connection-limit"
	RuleBadRequest  = "bad-request"
	RuleNoSandbox   = "no-sandbox"
)

// Config tunes a Proxy.
type Config struct {
	// Ceiling is the operator's bound over every org's allowlist.
	Ceiling egress.Ceiling
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver Resolver
	// Dial connects to a checked address; nil means net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxConns bounds a sandbox's connections through the proxy at once;
	// 0 means DefaultMaxConns.
	MaxConns int
	// BytesPerSecond bounds a sandbox's bandwidth through the proxy, each
	// way; 0 means unbounded.
	BytesPerSecond int64
	// Logger receives the proxy's own failures; nil discards them.
	Logger *slog.Logger
	// CA, when set, lets the proxy terminate TLS for hosts an org bound a
	// secret to, with a certificate the CA issues, and add the secret's
	// header to each request; nil tunnels every host end to end.
	CA *CA
	// UpstreamRoots verify the hosts whose TLS the proxy terminates; nil
	// means the system's roots.
	UpstreamRoots *x509.CertPool
	// ResponseHeaderTimeout bounds the wait for the header of a host's
	// answer once a forwarded request was sent (plain http:// and the
	// requests of a tunnel the proxy terminates); past it the sandbox gets
	// 504. 0 means DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// TunnelIdleTimeout closes both sides of a CONNECT tunnel once a whole
	// period this long passed with no byte either way; a tunnel that keeps
	// carrying bytes stays open however long it lasts. 0 means
	// DefaultTunnelIdleTimeout.
	TunnelIdleTimeout time.Duration
}

// Proxy is the egress proxy. Serve hands it one connection from a sandbox.
type Proxy struct {
	cfg      Config
	policies Policies
	rec      Recorder
	log      *slog.Logger
	srv      *http.Server
	conns    *connListener
	ids      atomic.Uint64

	mu        sync.Mutex
	sandboxes map[string]*sandboxState
}

// sandboxState is what the proxy holds for a sandbox with connections
// open: their count and its bandwidth limiters.
type sandboxState struct {
	open     int
	up, down *rate.Limiter
}

// New returns a proxy deciding with policies and recording to rec.
func New(policies Policies, rec Recorder, cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dial == nil {
		d := net.Dialer{Timeout: DefaultDialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if cfg.TunnelIdleTimeout <= 0 {
		cfg.TunnelIdleTimeout = DefaultTunnelIdleTimeout
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Proxy{cfg: cfg, policies: policies, rec: rec, log: lg, conns: newConnListener(), sandboxes: map[string]*sandboxState{}}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(lg.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*sandboxConn); ok {
				return context.WithValue(ctx, containerKey{}, sc.containerID)
			}
			return ctx
		},
	}
	go func() { _ = p.srv.Serve(p.conns) }()
	return p
}

// Close stops the proxy and ends its connections.
func (p *Proxy) Close() error {
	_ = p.conns.Close()
	return p.srv.Close()
}

type containerKey struct{}

// sandboxConn is a connection from inside a container's sandbox, as the
// bridge identified it: the container is never what the sandbox claims.
type sandboxConn struct {
	net.Conn
	containerID string
	once        sync.Once
	done        chan struct{}
}

// Close closes the connection and lets Serve return.
func (c *sandboxConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

// CloseWrite ends the sandbox's side of a tunnel when its far end did.
func (c *sandboxConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Serve serves one connection from inside the container's sandbox (as the
// bridge identified it) and returns when it is done.
func (p *Proxy) Serve(conn net.Conn, containerID string) {
	sc := &sandboxConn{Conn: conn, containerID: containerID, done: make(chan struct{})}
	if !p.conns.push(sc) {
		_ = conn.Close()
		return
	}
	<-sc.done
}

// ServeHTTP serves one request from a sandbox: CONNECT opens a tunnel,
// any other method with an absolute http:// URL is forwarded.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	containerID, _ := r.Context().Value(containerKey{}).(string)
	rec := egress.Record{ContainerID: containerID, At: start.UTC()}
	host, port, err := target(r)
	if err != nil {
		rec.Rule, rec.Reason = RuleBadRequest, err.Error()
		p.refuse(w, rec, http.StatusBadRequest)
		return
	}
	rec.Host, rec.Port = host, port
	scope, pol, err := p.policies.EgressPolicy(r.Context(), containerID)
	if err != nil {
		rec.Rule, rec.Reason = RuleNoSandbox, "the sandbox's policy could not be read"
		p.log.Warn("egress: policy", "container", containerID, "err", err)
		p.refuse(w, rec, http.StatusServiceUnavailable)
		return
	}
	rec.OrgID, rec.UserID, rec.ThreadID = scope.OrgID, scope.UserID, scope.ThreadID
	addrs, allowed := p.check(r.Context(), pol, &rec)
	if !allowed {
		p.refuse(w, rec, http.StatusForbidden)
		return
	}
	release, ok := p.acquire(containerID)
	if !ok {
		rec.Rule, rec.Reason = RuleConnLimit, fmt.Sprintf("the sandbox has %d connections open, the most it may", p.cfg.MaxConns)
		p.refuse(w, rec, http.StatusTooManyRequests)
		return
	}
	defer release()
	up, addr, err := p.dial(r.Context(), addrs, port)
	if err != nil {
		rec.Allowed, rec.Reason, rec.Duration = true, "unreachable: "+err.Error(), time.Since(start)
		p.rec.Record(rec)
		http.Error(w, "threadbox egress: "+host+" is unreachable", http.StatusBadGateway)
		return
	}
	rec.Allowed, rec.Address = true, addr.String()
	st := p.state(containerID)
	cu := &countingConn{Conn: up, up: st.up, down: st.down}
	secrets := egress.SecretsFor(pol.Secrets, host, port)
	switch {
	case r.Method == http.MethodConnect && len(secrets) > 0 && p.cfg.CA != nil:
		rec.Rule = egress.SecretRule(rec.Rule, secrets)
		p.intercept(w, cu, &rec, secrets)
	case r.Method == http.MethodConnect:
		p.tunnel(w, r, cu, &rec)
	default:
		p.forward(w, r, cu, &rec)
	}
	rec.BytesUp, rec.BytesDown = cu.sent.Load(), cu.received.Load()
	rec.Duration = time.Since(start)
	p.rec.Record(rec)
}

// target returns the host and port a request asks for, the host as
// egress.NormalizeHost writes it. A CONNECT names its target in the request
// line (authority form), never in a Host header; a host that is neither a
// name nor an address is refused before anything is decided, so what the
// ledger records is bounded and plain.
func target(r *http.Request) (string, int, error) {
	var hostport string
	defPort := "80"
	switch {
	case r.Method == http.MethodConnect && r.URL.Host == "":
		return "", 0, errors.New("CONNECT needs host:port in the request line")
	case r.Method == http.MethodConnect:
		hostport, defPort = r.URL.Host, ""
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		hostport = r.URL.Host
	case r.URL.IsAbs():
		return "", 0, fmt.Errorf("the proxy forwards http:// URLs; %s:// goes through CONNECT", r.URL.Scheme)
	default:
		return "", 0, errors.New("the request names no host: use the proxy as HTTP_PROXY/HTTPS_PROXY")
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == "" {
			return "", 0, errors.New("CONNECT needs host:port")
		}
		host, portStr = strings.Trim(hostport, "[]"), defPort
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("%.64q is not host:port", hostport)
	}
	h, ok := egress.NormalizeHost(host)
	if !ok {
		return "", 0, fmt.Errorf("%.64q is not a host name or an IP address (a name in another script goes in its xn-- form)", host)
	}
	return h, port, nil
}

// check is decide for rec's host and port, noted in rec: the verdict's
// rule and, when it refuses, its reason and the address refused (the
// resolved address that caused it, or the host when it is an address).
// It returns the addresses and whether the policy allows them.
func (p *Proxy) check(ctx context.Context, pol egress.Policy, rec *egress.Record) ([]netip.Addr, bool) {
	addrs, v := p.decide(ctx, pol, rec.Host, rec.Port)
	rec.Rule = v.Rule
	if !v.Allowed {
		rec.Reason = v.Reason
		switch {
		case v.Address.IsValid():
			rec.Address = v.Address.String()
		case len(addrs) > 0:
			rec.Address = addrs[0].String()
		}
	}
	return addrs, v.Allowed
}

// decide returns the verdict for host:port and the addresses it covers.
// A name is resolved only once the policy allows it, so a refused name
// makes no DNS query (nothing leaks through the resolver).
func (p *Proxy) decide(ctx context.Context, pol egress.Policy, host string, port int) ([]netip.Addr, egress.Verdict) {
	if a, err := netip.ParseAddr(host); err == nil {
		addrs := []netip.Addr{a.Unmap()}
		return addrs, egress.Decide(p.cfg.Ceiling, pol, host, port, addrs)
	}
	if v := egress.Decide(p.cfg.Ceiling, pol, host, port, nil); v.Rule != egress.RuleNoAddress {
		return nil, v
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := p.cfg.Resolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return nil, egress.Verdict{Rule: egress.RuleNoAddress, Reason: host + " did not resolve"}
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, egress.Decide(p.cfg.Ceiling, pol, host, port, addrs)
}

// dial connects to the first checked address that answers.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, netip.Addr, error) {
	var last error
	for _, a := range addrs {
		dctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
		c, err := p.cfg.Dial(dctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		cancel()
		if err == nil {
			return c, a, nil
		}
		last = err
	}
	return nil, netip.Addr{}, last
}

// refuse answers a refused request and records it.
func (p *Proxy) refuse(w http.ResponseWriter, rec egress.Record, status int) {
	p.rec.Record(rec)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "threadbox egress refused "+net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port))+": "+rec.Reason+"\n")
}

// acquire takes one of the sandbox's connection slots.
func (p *Proxy) acquire(containerID string) (release func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stateLocked(containerID)
	if st.open >= p.cfg.MaxConns {
		return nil, false
	}
	st.open++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if st.open--; st.open == 0 {
			delete(p.sandboxes, containerID)
		}
	}, true
}

func (p *Proxy) state(containerID string) *sandboxState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked(containerID)
}

func (p *Proxy) stateLocked(containerID string) *sandboxState {
	st := p.sandboxes[containerID]
	if st == nil {
		st = &sandboxState{}
		if bps := p.cfg.BytesPerSecond; bps > 0 {
			burst := int(max(bps, copyChunk))
			st.up, st.down = rate.NewLimiter(rate.Limit(bps), burst), rate.NewLimiter(rate.Limit(bps), burst)
		}
		p.sandboxes[containerID] = st
	}
	return st
}

// establish takes the client's connection of a CONNECT over from the HTTP
// server and tells the client the tunnel is established; ok is false when
// the connection cannot be taken or is gone (the caller has nothing left
// to do).
func establish(w http.ResponseWriter) (client net.Conn, brw *bufio.ReadWriter, ok bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "threadbox egress: cannot tunnel", http.StatusInternalServerError)
		return nil, nil, false
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, false
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		return nil, nil, false
	}
	return client, brw, true
}

// tunnel answers CONNECT and pipes the tunnel, first checking that a TLS
// ClientHello names the host the tunnel was opened to.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, up *countingConn, rec *egress.Record) {
	defer up.Close()
	client, brw, ok := establish(w)
	if !ok {
		return
	}
	defer client.Close()
	_ = client.SetReadDeadline(time.Now().Add(helloTimeout))
	first, err := brw.Reader.Peek(1)
	if err != nil {
		return
	}
	var head []byte
	if first[0] == 0x16 { // a TLS handshake record
		sni, seen := clientHelloSNI(brw.Reader)
		head = seen
		if sni != "" && !sameHost(sni, rec.Host) {
			rec.Allowed, rec.Rule = false, RuleSNIMismatch
			rec.Reason = fmt.Sprintf("the TLS handshake names %s, not %s the tunnel was opened to", sni, rec.Host)
			return
		}
	}
	_ = client.SetReadDeadline(time.Time{})
	if len(head) > 0 {
		if _, err := up.Write(head); err != nil {
			return
		}
	}
	if pipe(client, brw.Reader, up, p.cfg.TunnelIdleTimeout) {
		rec.Reason = fmt.Sprintf("closed after %v with no traffic", p.cfg.TunnelIdleTimeout)
	}
}

// forward sends one plain HTTP request to up and copies the answer back.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, up net.Conn, rec *egress.Record) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = true
	removeHopHeaders(out.Header)
	tr := &http.Transport{
		DialContext:           func(context.Context, string, string) (net.Conn, error) { return up, nil },
		DisableKeepAlives:     true,
		DisableCompression:    true,
		Proxy:                 nil,
		ResponseHeaderTimeout: p.cfg.ResponseHeaderTimeout,
	}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(out)
	if err != nil {
		rec.Reason = "upstream: " + err.Error()
		if isTimeout(err) {
			http.Error(w, fmt.Sprintf("threadbox egress: %s did not answer within %v", rec.Host, p.cfg.ResponseHeaderTimeout), http.StatusGatewayTimeout)
			return
		}
		http.Error(w, "threadbox egress: "+rec.Host+" did not answer", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	// Each read is passed on at once: a streamed answer (server-sent
	// events, a long poll) reaches the sandbox as it comes.
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, copyChunk)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// hopHeaders are the headers of one connection, not carried past the
// proxy (RFC 9110, section 7.6.1), and the proxy's own.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// clientHelloSNI reads a TLS ClientHello from r with crypto/tls and
// returns the server name it asks for and the bytes read, which the
// tunnel then carries on as they were.
func clientHelloSNI(r io.Reader) (string, []byte) {
	rc := &recordingReader{r: r}
	var sni string
	errSeen := errors.New("hello seen")
	srv := tls.Server(readOnlyConn{rc}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, errSeen
	}})
	_ = srv.Handshake()
	return sni, rc.seen
}

// sameHost compares two host names, ignoring case and a trailing dot.
func sameHost(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

type recordingReader struct {
	r    io.Reader
	seen []byte
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.seen = append(r.seen, p[:n]...)
	return n, err
}

// readOnlyConn lets crypto/tls read a ClientHello; what it would write
// (an alert) goes nowhere.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// copyChunk is the most one read or write moves, so that a rate limiter's
// burst covers it.
const copyChunk = 64 << 10

// pipe copies both ways between the sandbox's client connection (read
// through cr, which holds what the server buffered) and up until both
// directions end, or until a whole idle period passed with no byte either
// way; it reports whether it closed the tunnel as idle. Without a
// bandwidth bound it copies between the bare connections, which lets the
// kernel splice TCP to TCP; the counting connection still counts what went
// each way.
func pipe(client net.Conn, cr *bufio.Reader, up *countingConn, idle time.Duration) (idled bool) {
	var src io.Reader = cr
	dst := net.Conn(up)
	if up.up == nil && up.down == nil {
		if n := cr.Buffered(); n > 0 {
			b, _ := cr.Peek(n)
			w, err := up.Write(b)
			if err != nil {
				return false
			}
			_, _ = cr.Discard(w)
		}
		src, dst = bareConn(client), up.Conn
	}
	reports := make(chan copyReport, 2)
	var resume [2]chan bool
	for i := range resume {
		resume[i] = make(chan bool, 1)
	}
	go copyRounds(0, resume[0], reports, func() (int64, error) {
		n, err := io.Copy(dst, src)
		if dst != net.Conn(up) {
			up.sent.Add(n)
		}
		return n, err
	}, func() { closeWrite(dst) })
	go copyRounds(1, resume[1], reports, func() (int64, error) {
		if dst == net.Conn(up) {
			return io.CopyBuffer(client, up, make([]byte, copyChunk))
		}
		n, err := io.Copy(bareConn(client), up.Conn)
		up.received.Add(n)
		return n, err
	}, func() { closeWrite(client) })

	// Every idle period, both reads are interrupted (a deadline in the
	// past) so that each direction reports the bytes it moved since the
	// last check, then resumed; a copy the kernel splices reports nothing
	// until it returns, so this is how the proxy sees a tunnel's traffic.
	// A period with no byte either way closes the tunnel.
	live := 2
	var moved int64
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for live > 0 {
		select {
		case r := <-reports:
			moved += r.n
			live--
			continue
		case <-timer.C:
		}
		past := time.Unix(1, 0)
		_ = client.SetReadDeadline(past)
		_ = up.SetReadDeadline(past)
		var paused []int
		for range live {
			r := <-reports
			moved += r.n
			if r.final {
				live--
			} else {
				paused = append(paused, r.dir)
			}
		}
		goOn := moved > 0 || live == 0
		if goOn {
			_ = client.SetReadDeadline(time.Time{})
			_ = up.SetReadDeadline(time.Time{})
		} else {
			idled = true
			_ = client.Close()
			_ = up.Close()
		}
		for _, d := range paused {
			resume[d] <- goOn
		}
		if !goOn {
			return idled
		}
		moved = 0
		timer.Reset(idle)
	}
	return idled
}

// copyReport is what one direction of a tunnel moved in one round: until
// it ended (final) or until the idle check interrupted it.
type copyReport struct {
	dir   int
	n     int64
	final bool
}

// copyRounds runs copy until it ends, reporting each round's bytes; a
// round the idle check interrupted waits for its word to go on or stop.
// end runs once the direction ended on its own.
func copyRounds(dir int, resume <-chan bool, reports chan<- copyReport, copy func() (int64, error), end func()) {
	for {
		n, err := copy()
		if err == nil || !isTimeout(err) {
			end()
			reports <- copyReport{dir: dir, n: n, final: true}
			return
		}
		reports <- copyReport{dir: dir, n: n}
		if !<-resume {
			return
		}
	}
}

// isTimeout reports whether err is a deadline or a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// bareConn returns the connection a sandbox connection wraps.
func bareConn(c net.Conn) net.Conn {
	if sc, ok := c.(*sandboxConn); ok {
		return sc.Conn
	}
	return c
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else if cc, ok := c.(*countingConn); ok {
		closeWrite(cc.Conn)
	}
}

// countingConn is an upstream connection that counts the bytes each way
// and holds them to the sandbox's bandwidth limiters.
type countingConn struct {
	net.Conn
	up, down       *rate.Limiter
	sent, received atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		k := min(len(p), copyChunk)
		if c.up != nil {
			if err := c.up.WaitN(context.Background(), k); err != nil {
				return n, err
			}
		}
		w, err := c.Conn.Write(p[:k])
		n += w
		c.sent.Add(int64(w))
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (c *countingConn) Read(p []byte) (int, error) {
	if len(p) > copyChunk {
		p = p[:copyChunk]
	}
	n, err := c.Conn.Read(p)
	c.received.Add(int64(n))
	if c.down != nil && n > 0 {
		if werr := c.down.WaitN(context.Background(), n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

// connListener hands the connections Serve receives to the HTTP server.
type connListener struct {
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
