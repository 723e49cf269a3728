package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
// through than the email's limit; while the email is under attack a
// further address gets only a few guesses, yet the owner logs in from a
// new address as from one they used before; one address spraying emails
// stops at its own limit; the login body is small and must be JSON.
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

		// The email's counter is spent: the account is under attack. A
		// further address the owner never used gets three guesses, then 429.
		for i := range 4 {
			st, body := loginFrom(t, bases[i%len(bases)], "127.0.0.7", "application/json", loginJSON(owner, "another wrong guess"))
			if want := 401; i == 3 {
				if st != 429 || !strings.Contains(body, "too many failed logins for this email from this address") || !strings.Contains(body, "rate_limit_error") {
					t.Fatalf("a fourth guess from a new address while the email is under attack: %d %s", st, body)
				}
			} else if st != want {
				t.Fatalf("guess %d from a new address while the email is under attack: %d %s", i+1, st, body)
			}
		}
		// The owner is locked out of no address: from a new one the right
		// password gets in, and so it does from the known one.
		if st, body := loginFrom(t, bases[len(bases)-1], "127.0.0.4", "application/json", loginJSON(owner, password)); st != 200 || !strings.Contains(body, `"token"`) {
			t.Fatalf("the owner from a new address while the email is under attack: %d %s", st, body)
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

// TestDisabledAccountLoginIsAWrongPassword: the right password of a
// disabled user is answered exactly as a wrong one (401, invalid email or
// password), so the answer confirms no guess; it counts as a failure too.
func TestDisabledAccountLoginIsAWrongPassword(t *testing.T) {
	s := startServer(t, "", nil)
	admin := s.bootstrap("acme", "admin@acme.test")
	const email, password = "carol@acme.test", "carol-password-1"
	r := s.do("POST", appAPI+"/org/users", admin, map[string]any{"email": email, "password": password})
	if r.status != 201 {
		t.Fatalf("create user: %d %s", r.status, r.body)
	}
	uid := r.json(t)["id"].(string)
	login(t, s, email, password)
	if r := s.do("PATCH", appAPI+"/org/users/"+uid, admin, map[string]any{"disabled": true}); r.status != 200 {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	answer := func(pw string) (int, string, string) {
		r := s.do("POST", appAPI+"/auth/login", "", map[string]any{"email": email, "password": pw})
		var e struct {
			Error struct{ Type, Message string }
		}
		_ = json.Unmarshal(r.body, &e)
		return r.status, e.Error.Type, e.Error.Message
	}
	wst, wtyp, wmsg := answer("a wrong guess")
	rst, rtyp, rmsg := answer(password)
	if wst != 401 || wmsg != "invalid email or password" || rst != wst || rtyp != wtyp || rmsg != wmsg {
		t.Fatalf("a disabled user's right password: %d %s %q; a wrong one: %d %s %q; want the same answer", rst, rtyp, rmsg, wst, wtyp, wmsg)
	}
	// Both counted: eight more tries spend the email's ten.
	for range 8 {
		answer(password)
	}
	if st, _, msg := answer(password); st != 429 {
		t.Fatalf("the eleventh try: %d %q, want 429", st, msg)
	}
}

// TestOrgUsersKeepOtherOrgsDomains: with email domains assigned to orgs
// (ORG_EMAIL_DOMAINS), an admin of one org cannot add an address at
// another org's domain, and the refusal is the same whether the address
// has an account there or not: nothing to enumerate, nothing to claim
// before the other org adds its own people.
func TestOrgUsersKeepOtherOrgsDomains(t *testing.T) {
	s := startServer(t, "", map[string]string{"ORG_EMAIL_DOMAINS": `{"acme.test": "acme", "globex.test": "globex"}`})
	acme := s.bootstrap("acme", "admin@acme.test")
	globex := s.bootstrap("globex", "admin@globex.test")
	add := func(tok, email string) response {
		return s.do("POST", appAPI+"/org/users", tok, map[string]any{"email": email, "password": "a-password-1"})
	}
	if r := add(globex, "bob@globex.test"); r.status != 201 {
		t.Fatalf("globex adds its own: %d %s", r.status, r.body)
	}
	refusal := func(r response) string {
		var e struct {
			Error struct{ Type, Message string }
		}
		_ = json.Unmarshal(r.body, &e)
		return fmt.Sprintf("%d %s %s", r.status, e.Error.Type, e.Error.Message)
	}
	taken, free := add(acme, "bob@globex.test"), add(acme, "carol@globex.test")
	if taken.status != 403 || refusal(taken) != refusal(free) {
		t.Fatalf("acme adding an address at globex's domain: with an account %s, without %s; want one 403", refusal(taken), refusal(free))
	}
	if r := add(acme, "dave@eng.globex.test"); r.status != 403 {
		t.Fatalf("acme adding an address at a subdomain of globex's: %d %s", r.status, r.body)
	}
	if r := add(globex, "carol@globex.test"); r.status != 201 {
		t.Fatalf("globex adds carol, whom acme could not claim: %d %s", r.status, r.body)
	}
	for _, email := range []string{"dave@acme.test", "erin@elsewhere.test"} {
		if r := add(acme, email); r.status != 201 {
			t.Fatalf("acme adds %s: %d %s", email, r.status, r.body)
		}
	}
	if r := s.do("GET", appAPI+"/org/users", acme, nil); strings.Contains(string(r.body), "globex.test") {
		t.Fatalf("acme's users: %s", r.body)
	}
}
