package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"threadbox/infra/llm/fakeupstream"
)

// replicasOpts tune the replicas section.
type replicasOpts struct {
	databaseURL string // a PostgreSQL server to make a throwaway database on
	n           int    // requests per row at concurrency 16
}

// benchReplicas measures the Messages API (no tools, a scripted upstream)
// through HAProxy, round-robin, in front of one and then two threadbox
// replicas on one throwaway PostgreSQL database, beside one replica
// called directly: the load balancer's added latency and what a second
// replica on the same machine buys. Every process shares this machine's
// CPUs, so two replicas compete with each other, the balancer, the
// upstream and the client.
func benchReplicas(ctx context.Context, o opts, out io.Writer) error {
	ro := o.replicas
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		haproxy = "/usr/sbin/haproxy"
	}
	if _, err := os.Stat(haproxy); err != nil || ro.databaseURL == "" {
		fmt.Fprintln(out, "\nreplicas: skipped (needs haproxy and a PostgreSQL server: -replicas-database-url or TEST_DATABASE_URL)")
		return nil
	}
	work, err := os.MkdirTemp("", "threadbox-bench-replicas-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin, err := threadboxBinary(ctx, o.files.threadboxBin, work)
	if err != nil {
		return err
	}
	dbURL, drop, err := throwawayDatabase(ctx, ro.databaseURL)
	if err != nil {
		return err
	}
	defer drop()
	up := fakeupstream.New()
	defer up.Close()
	up.SetFallback(benchReply)

	b := make([]byte, 6)
	rand.Read(b)
	env := append(os.Environ(), "DATA_DIR="+filepath.Join(work, "data"), "DATABASE_URL="+dbURL,
		"SANDBOX_BACKEND=local", "SANDBOX_DISK_QUOTA=none", "LOG_LEVEL=error", "THREADBOX_INSTANCE=benchrep"+hex.EncodeToString(b),
		"MODEL_PROVIDER=anthropic", "MODEL_BASE_URL="+up.URL(), "MODEL_NAME=bench-model")
	var replicas []*exec.Cmd
	defer func() {
		for _, c := range replicas {
			_ = c.Process.Signal(syscall.SIGTERM)
			_ = c.Wait()
		}
	}()
	var addrs []string
	for i := range 2 {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		c := exec.CommandContext(ctx, bin, "serve")
		c.Env = append(env, "LISTEN_ADDR="+addr)
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		stopsWithTheBench(c)
		if err := c.Start(); err != nil {
			return err
		}
		replicas = append(replicas, c)
		addrs = append(addrs, addr)
		if err := waitHealthy("http://"+addr, 30*time.Second); err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
	}
	boot := exec.CommandContext(ctx, bin, "admin", "bootstrap", "--org", "bench", "--email", "bench@bench.test")
	boot.Env = env
	tok, err := boot.Output()
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	token := strings.TrimSpace(string(tok))

	lb := func(n int) (string, func(), error) {
		addr, err := freeAddr()
		if err != nil {
			return "", nil, err
		}
		cfg := "global\n  maxconn 1024\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 1m\n  timeout server 1m\n" +
			"frontend fe\n  bind " + addr + "\n  default_backend be\nbackend be\n  balance roundrobin\n  http-reuse always\n"
		for i, a := range addrs[:n] {
			cfg += fmt.Sprintf("  server r%d %s\n", i, a)
		}
		f := filepath.Join(work, fmt.Sprintf("haproxy-%d.cfg", n))
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			return "", nil, err
		}
		c := exec.CommandContext(ctx, haproxy, "-db", "-f", f)
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		stopsWithTheBench(c)
		if err := c.Start(); err != nil {
			return "", nil, err
		}
		stop := func() { _ = c.Process.Kill(); _ = c.Wait() }
		if err := waitHealthy("http://"+addr, 10*time.Second); err != nil {
			stop()
			return "", nil, err
		}
		return "http://" + addr, stop, nil
	}

	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}}
	body := `{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`
	type row struct {
		name string
		base string
	}
	lb1, stop1, err := lb(1)
	if err != nil {
		return err
	}
	defer stop1()
	lb2, stop2, err := lb(2)
	if err != nil {
		return err
	}
	defer stop2()
	rows := []row{{"1 replica, direct", "http://" + addrs[0]}, {"1 replica via haproxy", lb1}, {"2 replicas via haproxy", lb2}}
	fmt.Fprintf(out, "\nMessages API through a load balancer (HAProxy round-robin; replicas on one PostgreSQL; all on this machine's %d CPUs, shared by the replicas, HAProxy, the upstream and the client)\n", runtime.NumCPU())
	fmt.Fprintf(out, "%-26s %12s %12s %16s %12s %12s\n", "", "c=1 p50", "c=1 p99", "c=16 req/s", "c=16 p50", "c=16 p99")
	for _, r := range rows {
		call := func() (time.Duration, error) { return post(hc, r.base+"/api/gpt/v1/messages", token, body) }
		if _, err := timedConcurrent(4, 200, call); err != nil { // warm up
			return fmt.Errorf("%s: %w", r.name, err)
		}
		one, err := timedConcurrent(1, 300, call)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		start := time.Now()
		many, err := timedConcurrent(16, ro.n, call)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		rate := float64(len(many)) / time.Since(start).Seconds()
		p50, p99 := percentiles(one)
		m50, m99 := percentiles(many)
		fmt.Fprintf(out, "%-26s %12s %12s %16.0f %12s %12s\n", r.name, ms(p50), ms(p99), rate, ms(m50), ms(m99))
	}
	return nil
}

// throwawayDatabase makes a fresh database on the server of base and
// returns its URL and the function that drops it.
func throwawayDatabase(ctx context.Context, base string) (string, func(), error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "tb_bench_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		admin.Close()
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		admin.Close()
	}, nil
}

// waitHealthy waits until base answers /healthz.
func waitHealthy(base string, within time.Duration) error {
	for deadline := time.Now().Add(within); ; {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer /healthz within %s", base, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
