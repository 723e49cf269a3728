package store_test

import (
	"context"
	"io"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"threadbox/domain/fault"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// tcpProxy forwards connections from a local port to target until closed;
// closing it drops every connection and refuses new ones, as a database
// server that went away does.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestPostgreSQLGoneIsUnavailable: a store whose PostgreSQL goes away
// (its connections dropped, its port closed, as during a restart) answers
// fault.Unavailable — 503 api_error with a message saying to retry, from
// the one error handler — for reads, writes and transactions alike (before,
// these were internal errors: 500 "internal server error").
func TestPostgreSQLGoneIsUnavailable(t *testing.T) {
	ctx := context.Background()
	u, err := neturl.Parse(storetest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	s, err := store.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Threads().Thread(ctx, "org_x", "usr_x", "thr_x"); !fault.Is(err, fault.NotFound) {
		t.Fatalf("through the proxy: %v", err)
	}
	proxy.close()

	checks := map[string]func() error{
		"read": func() error {
			_, err := s.Threads().Thread(ctx, "org_x", "usr_x", "thr_x")
			return err
		},
		"write": func() error {
			_, err := s.Leases().AcquireLease(ctx, "turn:thr_x", "h1", time.Now().Add(time.Minute), time.Now())
			return err
		},
		"transaction": func() error {
			return s.InTx(ctx, func(tx *store.Store) error {
				_, err := tx.Threads().Thread(ctx, "org_x", "usr_x", "thr_x")
				return err
			})
		},
	}
	for name, f := range checks {
		err := f()
		if !fault.Is(err, fault.Unavailable) {
			t.Errorf("%s with the database gone: kind %q: %v", name, fault.KindOf(err), err)
		}
	}
}
