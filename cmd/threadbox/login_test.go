package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// loginFrom posts a login to base from the loopback address addr (Linux
// routes all of 127/8 to lo, so each address is a distinct client) and
// returns the status and body.
func loginFrom(t *testing.T, base, addr, contentType string, body []byte) (int, string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		return d.DialContext(ctx, network, a)
	}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest("POST", base+appAPI+"/auth/login", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("login from %s: %v", addr, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func loginJSON(email, password string) []byte {
	return []byte(`{"email":"` + email + `","password":"` + password + `"}`)
}

// TestLoginThrottle: a concurrent burst of wrong passwords, spread over two
// servers on one database where there are two, gets no more failures
// through than the email's limit; the owner still logs in from an address
// they logged in from before while other addresses are refused; one
// address spraying emails stops at its own limit; the login body is small
// and must be JSON.
func TestLoginThrottle(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		const owner, password = "owner@acme.test", "the-owner-password"
		env := map[string]string{"LOGIN_ADDR_LIMIT": "20"}
		s := startServer(t, dbURL, env)
		pw := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(pw, []byte(password), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.cli("admin", "bootstrap", "--org", "acme", "--email", owner, "--password-file", pw); err != nil {
			t.Fatal(err)
		}
		bases := []string{s.base}
		if dbURL != "" { // a second replica on the same database
			bases = append(bases, startServer(t, dbURL, env).base)
		}
		if st, body := loginFrom(t, s.base, "127.0.0.2", "application/json", loginJSON(owner, password)); st != 200 {
			t.Fatalf("the owner's first login: %d %s", st, body)
		}

		// 30 wrong guesses at once from another address.
		var mu sync.Mutex
		got := map[int]int{}
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, _ := loginFrom(t, bases[i%len(bases)], "127.0.0.3", "application/json", loginJSON(owner, "a wrong guess"))
				mu.Lock()
				got[st]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if got[401] > 10 || got[401]+got[429] != 30 {
			t.Fatalf("a burst of 30 wrong guesses: %v, want at most 10 answered 401 and the rest 429", got)
		}

		// The email's counter is spent: a new address is refused even with
		// the right password; the owner's known address gets through.
		if st, body := loginFrom(t, bases[len(bases)-1], "127.0.0.4", "application/json", loginJSON(owner, password)); st != 429 || !strings.Contains(body, "too many failed logins for this email") || !strings.Contains(body, "rate_limit_error") {
			t.Fatalf("right password from a new address while the email is locked: %d %s", st, body)
		}
		for _, b := range bases {
			if st, body := loginFrom(t, b, "127.0.0.2", "application/json", loginJSON(owner, password)); st != 200 || !strings.Contains(body, `"token"`) {
				t.Fatalf("the owner from their known address: %d %s", st, body)
			}
		}

		// One address trying many emails stops at the address's limit.
		for i := range 21 {
			st, body := loginFrom(t, s.base, "127.0.0.5", "application/json", loginJSON("user"+string(rune('a'+i))+"@acme.test", "a wrong guess"))
			want := 401
			if i == 20 {
				want = 429
			}
			if st != want || (want == 429 && !strings.Contains(body, "for this address")) {
				t.Fatalf("spraying, attempt %d: %d %s", i+1, st, body)
			}
		}

		// Only application/json, and only a small body.
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
			if st, body := loginFrom(t, s.base, "127.0.0.6", ct, loginJSON(owner, password)); st != 415 || !strings.Contains(body, "application/json") {
				t.Fatalf("login as %q: %d %s", ct, st, body)
			}
		}
		if st, body := loginFrom(t, s.base, "127.0.0.6", "application/json; charset=utf-8", loginJSON(owner, password)); st != 200 {
			t.Fatalf("login with a charset: %d %s", st, body)
		}
		big := []byte(`{"email":"` + owner + `","password":"` + password + `","pad":"` + strings.Repeat("x", 64<<10) + `"}`)
		if st, body := loginFrom(t, s.base, "127.0.0.6", "application/json", big); st != 413 {
			t.Fatalf("a 64 KiB login body: %d %s", st, body)
		}
	})
}

// TestLoginThrottleBehindProxy: behind a trusted proxy each client is
// counted under the address the proxy appended to X-Forwarded-For (what a
// client wrote to its left changes nothing); a peer that is not a trusted
// proxy is counted under its own address whatever it says.
func TestLoginThrottleBehindProxy(t *testing.T) {
	post := func(s *server, xff, email string) int {
		t.Helper()
		return s.do("POST", appAPI+"/auth/login", "", loginJSON(email, "a wrong guess"), "X-Forwarded-For", xff).status
	}
	proxied := startServer(t, "", map[string]string{"LOGIN_ADDR_LIMIT": "3", "TRUSTED_PROXIES": "127.0.0.1"})
	direct := startServer(t, "", map[string]string{"LOGIN_ADDR_LIMIT": "3"})
	tests := []struct {
		name   string
		s      *server
		xff    string
		status int
	}{
		{"client 1, first", proxied, "203.0.113.1", 401},
		{"client 1, second", proxied, "203.0.113.1", 401},
		{"client 1, third", proxied, "203.0.113.1", 401},
		{"client 1, over its limit", proxied, "203.0.113.1", 429},
		{"client 1 writing another address to the left", proxied, "198.51.100.9, 203.0.113.1", 429},
		{"client 2 is counted apart", proxied, "203.0.113.2", 401},
		{"an untrusted peer: its own address", direct, "203.0.113.1", 401},
		{"an untrusted peer, second", direct, "203.0.113.2", 401},
		{"an untrusted peer, third", direct, "203.0.113.3", 401},
		{"an untrusted peer over its limit, whatever it says", direct, "203.0.113.4", 429},
	}
	for i, tc := range tests {
		// A new email each time, so only the address counter can refuse.
		if got := post(tc.s, tc.xff, "user"+strconv.Itoa(i)+"@acme.test"); got != tc.status {
			t.Fatalf("%s: %d, want %d", tc.name, got, tc.status)
		}
	}
}
