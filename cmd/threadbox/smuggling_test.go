package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/infra/sandbox/sandboxtest"
)

// TestRefusedBodiesCaptureNothingBehindAProxy is the request-capture attack
// through a load balancer that reuses its server connections (HAProxy with
// http-reuse always): an attacker sends a request the server refuses
// without reading its body — an unrouted or lowercase method, a chunked
// body, an unknown route, an upload the org's policy refuses, a request
// without a token — whose body ends in the head of an upload of the
// attacker's own with room for the next request. Had the server parsed
// that body as a request, the next user's request on the reused connection
// (bearer token included) would be stored in the attacker's file and the
// user answered with the attacker's upload. Each request must be answered
// as itself, and no file may appear.
func TestRefusedBodiesCaptureNothingBehindAProxy(t *testing.T) {
	s := startServer(t, "", nil)
	f := newWSFixture(t, s)
	attacker := f.out
	r := s.do("POST", appAPI+"/project", attacker, map[string]any{"name": "Trap"})
	if r.status != 201 {
		t.Fatalf("project: %d %s", r.status, r.body)
	}
	trap := f.thread(t, attacker, r.json(t)["id"].(string))
	// The attacker's second org refuses uploads by policy.
	refuser := s.bootstrap("initech", "admin@initech.test")
	r = s.do("POST", appAPI+"/project", refuser, map[string]any{"name": "Closed"})
	if r.status != 201 {
		t.Fatalf("project: %d %s", r.status, r.body)
	}
	closed := f.thread(t, refuser, r.json(t)["id"].(string))
	if r := s.do("PATCH", appAPI+"/org/features", refuser, map[string]any{"uploads": map[string]any{"enabled": false}}); r.status != 200 {
		t.Fatalf("uploads off: %d %s", r.status, r.body)
	}
	lb := startReusingProxy(t, strings.TrimPrefix(s.base, "http://"))
	victim := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}

	padding := strings.Repeat("\r\n", 10<<10) // past fasthttp's prefetch of a body; parsers skip blank lines before a request
	capture := func(i int) string {
		return padding + fmt.Sprintf("PUT %s/thread/%s/put-file/captured-%d.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 120\r\n\r\n", appAPI, trap, i, attacker)
	}
	fixedAs := func(token, method, path string) func(string) string {
		return func(body string) string {
			return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s", method, path, token, len(body), body)
		}
	}
	chunkedAs := func(token, method, path string) func(string) string {
		return func(body string) string {
			return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", method, path, token, len(body), body)
		}
	}
	fixed := func(method, path string) func(string) string { return fixedAs(attacker, method, path) }
	chunked := func(method, path string) func(string) string { return chunkedAs(attacker, method, path) }
	noToken := func(body string) string {
		return fmt.Sprintf("PUT %s/thread/%s/put-file/x.txt HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", appAPI, trap, len(body), body)
	}
	cases := []struct {
		name    string
		request func(body string) string
		status  int
	}{
		{"unrouted method", fixed("PROPFIND", appAPI+"/me"), 501},
		{"unrouted method, chunked", chunked("BREW", "/coffee"), 501},
		{"lowercase method", fixed("post", "/v1/messages"), 501},
		{"unknown route", fixed("POST", "/nowhere"), 404},
		{"unknown route, chunked", chunked("POST", "/nowhere"), 404},
		{"upload refused by policy", fixedAs(refuser, "PUT", appAPI+"/thread/"+closed+"/put-file/refused.txt"), 403},
		{"upload refused by policy, chunked", chunkedAs(refuser, "PUT", appAPI+"/thread/"+closed+"/put-file/refused.txt"), 403},
		{"no token", noToken, 401},
	}
	for i, tc := range cases {
		status, answer := rawExchange(t, lb, tc.request(capture(i)))
		if status != tc.status || !strings.Contains(answer, `"type":"error"`) {
			t.Errorf("%s: the attacker's request was answered %d %.80q, want %d from threadbox", tc.name, status, answer, tc.status)
		}
		for range 3 {
			req, _ := http.NewRequest("GET", "http://"+lb+appAPI+"/me", nil)
			req.Header.Set("Authorization", "Bearer "+f.admin)
			resp, err := victim.Do(req)
			if err != nil {
				t.Fatalf("%s: the next user's request: %v", tc.name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), "admin@acme.test") {
				t.Errorf("%s: the next user was answered %d %.120s, not as itself", tc.name, resp.StatusCode, b)
			}
		}
		if r := f.download(attacker, trap, fmt.Sprintf("/mnt/user-data/uploads/captured-%d.txt", i)); r.status != 404 {
			t.Errorf("%s: the attacker's file holds the next request: %d %q", tc.name, r.status, r.body)
		}
	}
}

// rawExchange sends one raw request to addr and reads its answer.
func rawExchange(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// startReusingProxy starts HAProxy in front of server with every idle
// server connection shared between clients (http-reuse always), and
// returns its address.
func startReusingProxy(t *testing.T, server string) string {
	t.Helper()
	haproxy := needHAProxy(t)
	addr := freeAddr(t)
	cfg := "global\n  maxconn 64\n" +
		"defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n  http-reuse always\n" +
		"frontend fe\n  bind " + addr + "\n  default_backend be\n" +
		"backend be\n  server s0 " + server + " maxconn 1\n"
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(haproxy, "-db", "-f", file)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, func() string { return "haproxy did not come up: " + out.String() })
	return addr
}
