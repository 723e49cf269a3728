package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// refreshPath is the browser session's endpoint (web/session.go).
const refreshPath = appAPI + "/auth/refresh"

// refreshCookieOf returns the threadbox_refresh cookie a response sets.
func refreshCookieOf(t *testing.T, r response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "threadbox_refresh" {
			return c
		}
	}
	return nil
}

// TestBrowserSessionAPI: a sign-in with refresh_cookie sets an HttpOnly,
// SameSite=Strict refresh cookie scoped to the refresh endpoint (Secure
// only over https, told by a trusted proxy) and answers with a short-lived
// access token; the refresh token is no bearer token; the refresh
// endpoint refuses a call without its custom header, and without a cookie;
// sign-out needs the header too, and then revokes the session: every
// access token of it and the refresh token are refused.
func TestBrowserSessionAPI(t *testing.T) {
	s := e2eServer(t, map[string]string{"ACCESS_TTL": "5m", "TRUSTED_PROXIES": "127.0.0.1/32"})
	before := time.Now()
	r := s.do("POST", appAPI+"/auth/login", "", map[string]any{"email": e2eEmail, "password": e2ePassword, "refresh_cookie": true})
	if r.status != 200 {
		t.Fatalf("sign in: %d %s", r.status, r.body)
	}
	body := r.json(t)
	access := body["token"].(string)
	exp, _ := time.Parse(time.RFC3339Nano, body["expires_at"].(string))
	end, _ := time.Parse(time.RFC3339Nano, body["session_expires_at"].(string))
	if d := exp.Sub(before); d < 4*time.Minute || d > 6*time.Minute {
		t.Errorf("the access token lasts %s, want ACCESS_TTL (5m)", d)
	}
	if d := end.Sub(before); d < 11*time.Hour || d > 13*time.Hour {
		t.Errorf("the session lasts %s, want SESSION_TTL (12h)", d)
	}
	ck := refreshCookieOf(t, r)
	if ck == nil {
		t.Fatalf("no refresh cookie: %v", r.header.Values("Set-Cookie"))
	}
	raw := strings.Join(r.header.Values("Set-Cookie"), "; ")
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/api/v1/app/auth/refresh" || ck.Secure {
		t.Errorf("the refresh cookie over http: %s", raw)
	}
	if ck.Expires.Sub(end).Abs() > 2*time.Second {
		t.Errorf("the refresh cookie expires %s, the session %s", ck.Expires, end)
	}
	cookie := "threadbox_refresh=" + ck.Value

	if me := s.do("GET", appAPI+"/me", access, nil); me.status != 200 || me.json(t)["email"] != e2eEmail {
		t.Fatalf("the access token: %d %s", me.status, me.body)
	}
	if me := s.do("GET", appAPI+"/me", ck.Value, nil); me.status != 401 {
		t.Errorf("the refresh token used as a bearer token: %d %s", me.status, me.body)
	}

	// The custom header is required, before the cookie is looked at.
	if r := s.do("POST", refreshPath, "", nil, "Cookie", cookie); r.status != 403 || !strings.Contains(string(r.body), "X-Threadbox-Refresh") {
		t.Errorf("refresh without the header: %d %s", r.status, r.body)
	}
	if r := s.do("POST", refreshPath, "", nil, "Cookie", cookie, "X-Threadbox-Refresh", "yes"); r.status != 403 {
		t.Errorf("refresh with another header value: %d %s", r.status, r.body)
	}
	// Without a cookie there is no session to refresh: no content, not an
	// error (a signed-out page asks on every load).
	if r := s.do("POST", refreshPath, "", nil, "X-Threadbox-Refresh", "1"); r.status != 204 || len(r.body) != 0 {
		t.Errorf("refresh without a cookie: %d %s", r.status, r.body)
	}
	if r := s.do("POST", refreshPath, "", nil, "X-Threadbox-Refresh", "1", "Cookie", "threadbox_refresh="+access); r.status != 401 {
		t.Errorf("an access token as the refresh cookie: %d %s", r.status, r.body)
	}
	fresh := s.do("POST", refreshPath, "", nil, "Cookie", cookie, "X-Threadbox-Refresh", "1")
	if fresh.status != 200 || fresh.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("refresh: %d %v %s", fresh.status, fresh.header, fresh.body)
	}
	fb := fresh.json(t)
	access2 := fb["token"].(string)
	if fb["id"] != body["id"] || fb["session_expires_at"] != body["session_expires_at"] {
		t.Errorf("a refresh changed the session: %s, was %s", fresh.body, r.body)
	}
	if me := s.do("GET", appAPI+"/me", access2, nil); me.status != 200 {
		t.Fatalf("the refreshed access token: %d %s", me.status, me.body)
	}

	// Over https, as a trusted proxy says, the cookie is Secure.
	sec := s.do("POST", appAPI+"/auth/login", "", map[string]any{"email": e2eEmail, "password": e2ePassword, "refresh_cookie": true}, "X-Forwarded-Proto", "https")
	if c := refreshCookieOf(t, sec); sec.status != 200 || c == nil || !c.Secure {
		t.Errorf("the refresh cookie behind an https proxy: %d %v", sec.status, sec.header.Values("Set-Cookie"))
	}

	// A plain login is unchanged: a session token, no cookie.
	plain := s.do("POST", appAPI+"/auth/login", "", map[string]any{"email": e2eEmail, "password": e2ePassword})
	if plain.status != 200 || refreshCookieOf(t, plain) != nil || plain.json(t)["session_expires_at"] != nil {
		t.Errorf("a plain login: %d %v %s", plain.status, plain.header.Values("Set-Cookie"), plain.body)
	}

	// Sign-out needs the header too; then both access tokens and the
	// refresh token are refused, and the cookie is deleted.
	if r := s.do("DELETE", refreshPath, "", nil, "Cookie", cookie); r.status != 403 {
		t.Errorf("sign-out without the header: %d %s", r.status, r.body)
	}
	if me := s.do("GET", appAPI+"/me", access, nil); me.status != 200 {
		t.Fatalf("a refused sign-out ended the session: %d", me.status)
	}
	out := s.do("DELETE", refreshPath, "", nil, "Cookie", cookie, "X-Threadbox-Refresh", "1")
	if out.status != 204 {
		t.Fatalf("sign-out: %d %s", out.status, out.body)
	}
	if c := refreshCookieOf(t, out); c == nil || c.Value != "" || c.Path != "/api/v1/app/auth/refresh" || !c.Expires.Before(time.Now()) {
		t.Errorf("sign-out does not delete the cookie: %v", out.header.Values("Set-Cookie"))
	}
	for i, tok := range []string{access, access2} {
		if me := s.do("GET", appAPI+"/me", tok, nil); me.status != 401 {
			t.Errorf("access token %d after sign-out: %d", i+1, me.status)
		}
	}
	if r := s.do("POST", refreshPath, "", nil, "Cookie", cookie, "X-Threadbox-Refresh", "1"); r.status != 401 {
		t.Errorf("refresh after sign-out: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", refreshPath, "", nil, "Cookie", cookie, "X-Threadbox-Refresh", "1"); r.status != 204 {
		t.Errorf("a second sign-out: %d %s", r.status, r.body)
	}
	// The plain session token is another session: still valid.
	if me := s.do("GET", appAPI+"/me", plain.json(t)["token"].(string), nil); me.status != 200 {
		t.Errorf("another session after sign-out: %d", me.status)
	}
}
