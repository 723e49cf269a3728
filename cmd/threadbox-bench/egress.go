package main

// The egress section: the egress proxy (infra/egressproxy) on loopback, as
// the in-sandbox bridge hands it connections, against an HTTPS server on
// loopback. Throughput: one large download through a CONNECT tunnel beside
// the same download made directly, in the same run. Latency: HTTPS
// requests each on a new connection (a TLS handshake every time, the
// proxy's worst case), through the proxy and directly; the added latency
// is the difference of the p50s. The bridge's own hop (the agent carrying
// the connection out of the sandbox) is the product API's and is not in
// these rows.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"time"

	"threadbox/domain/egress"
	"threadbox/infra/egressproxy"
)

type benchPolicies struct{ pol egress.Policy }

func (b benchPolicies) EgressPolicy(_ context.Context, containerID string) (egress.Scope, egress.Policy, error) {
	return egress.Scope{OrgID: "org_bench", ContainerID: containerID}, b.pol, nil
}

type benchResolver struct{}

func (benchResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

type benchRecorder struct{}

func (benchRecorder) Record(egress.Record) {}

// benchEgress prints the egress table.
func benchEgress(ctx context.Context, n int, out io.Writer) error {
	const size = 512 << 20
	chunk := make([]byte, 1<<20)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
			for range size / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	allow, _ := egress.ParsePatterns([]string{"bench.test"})
	ceiling, _ := egress.NewCeiling(nil, []string{"127.0.0.1"})
	proxy := egressproxy.New(benchPolicies{egress.Policy{On: true, Allow: allow}}, benchRecorder{}, egressproxy.Config{Ceiling: ceiling, Resolver: benchResolver{}})
	defer proxy.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); proxy.Serve(c, "cnt_bench") }()
		}
	}()

	client := func(viaProxy, keepAlive bool) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.DisableKeepAlives = !keepAlive
		tr.TLSClientConfig.ServerName = "bench.test"
		tr.TLSClientConfig.InsecureSkipVerify = true // the test server's certificate names example.com
		// Both ways dial the same loopback address; only the proxy differs.
		if viaProxy {
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})
		} else {
			var d net.Dialer
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, "127.0.0.1:"+port)
			}
		}
		tr.TLSClientConfig.MinVersion = tls.VersionTLS12
		return &http.Client{Transport: tr}
	}
	get := func(c *http.Client, path string) (int64, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://bench.test:"+port+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return io.Copy(io.Discard, resp.Body)
	}
	// The two ways alternate, so that the machine's other load falls on
	// both alike.
	dc, pc := client(false, false), client(true, false)
	var direct, proxied float64
	for range 3 {
		for _, way := range []struct {
			c    *http.Client
			best *float64
		}{{dc, &direct}, {pc, &proxied}} {
			start := time.Now()
			got, err := get(way.c, "/big")
			if err != nil {
				return fmt.Errorf("download: %w", err)
			}
			if got != size {
				return fmt.Errorf("downloaded %d bytes of %d", got, size)
			}
			*way.best = max(*way.best, float64(size)/(1<<20)/time.Since(start).Seconds())
		}
	}
	for range 20 {
		for _, c := range []*http.Client{dc, pc} {
			if _, err := get(c, "/"); err != nil {
				return fmt.Errorf("warm-up request: %w", err)
			}
		}
	}
	dl := make([]time.Duration, 0, n)
	pl := make([]time.Duration, 0, n)
	for range n {
		for _, way := range []struct {
			c *http.Client
			d *[]time.Duration
		}{{dc, &dl}, {pc, &pl}} {
			start := time.Now()
			if _, err := get(way.c, "/"); err != nil {
				return fmt.Errorf("request: %w", err)
			}
			*way.d = append(*way.d, time.Since(start))
		}
	}
	d50, d99 := percentiles(dl)
	p50, p99 := percentiles(pl)
	fmt.Fprintf(out, "\nEgress proxy: a %d MiB HTTPS download (best of 3) and HTTPS requests on new connections (p50/p99 of %d), direct vs through the proxy on loopback\n", size>>20, n)
	fmt.Fprintf(out, "%-34s %12s %12s\n", "row", "direct", "proxy")
	fmt.Fprintf(out, "%-34s %9.0f MB/s %9.0f MB/s\n", "download throughput", direct, proxied)
	fmt.Fprintf(out, "%-34s %12s %12s\n", "request p50", ms(d50), ms(p50))
	fmt.Fprintf(out, "%-34s %12s %12s\n", "request p99", ms(d99), ms(p99))
	fmt.Fprintf(out, "egress throughput proxy / direct = %.2f (target >= 0.80)\n", proxied/direct)
	fmt.Fprintf(out, "egress added latency per HTTPS request p50 = %s (target <= 1 ms)\n", ms(p50-d50))
	return nil
}
