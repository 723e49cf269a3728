package main

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"threadbox/domain/org"
	"threadbox/infra/egressproxy"
	"threadbox/infra/jwt"
	"threadbox/infra/store"
)

func TestFirstStartAndHealth(t *testing.T) {
	// No sandbox backend: ready needs only the database (TestUnavailableBackendsSayWhy
	// covers readiness with backends).
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": ","})
	out := s.stdout.String()
	if !strings.Contains(out, "admin@threadbox.local") || !strings.Contains(out, "API token: ey") {
		t.Fatalf("first start did not say how to log in: %q", out)
	}
	if r := s.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	key, err := os.Stat(filepath.Join(s.dataDir, "jwt-ed25519.pem"))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Fatalf("signing key not generated with 0600: %v %v", err, key)
	}
	// The printed token works.
	tok := out[strings.Index(out, "API token: ")+len("API token: "):]
	tok = strings.Fields(tok)[0]
	if r := s.do("GET", "/api/v1/app/thread", tok, nil); r.status != 200 {
		t.Fatalf("printed token refused: %d %s", r.status, r.body)
	}
}

func TestBootstrapIsIdempotentAndTokensCLI(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		t1 := s.bootstrap("acme", "admin@acme.test")
		t2 := s.bootstrap("acme", "admin@acme.test")
		if t1 == t2 || strings.Count(t1, ".") != 2 || strings.Contains(t1, "\n") {
			t.Fatalf("bootstrap must print exactly one new token: %q %q", t1, t2)
		}
		for _, tok := range []string{t1, t2} {
			if r := s.do("GET", "/api/v1/app/thread", tok, nil); r.status != 200 {
				t.Fatalf("bootstrap token refused: %d", r.status)
			}
		}
		t3, err := s.cli("token", "create", "--email", "admin@acme.test", "--name", "ci", "--ttl", "1h")
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.cli("token", "list", "--email", "admin@acme.test")
		if err != nil || strings.Count(list, "active") != 3 || !strings.Contains(list, "ci") {
			t.Fatalf("token list: %v\n%s", err, list)
		}
		claims, _, _ := gojwt.NewParser().ParseUnverified(t3, gojwt.MapClaims{})
		jti := claims.Claims.(gojwt.MapClaims)["jti"].(string)
		if _, err := s.cli("token", "revoke", jti); err != nil {
			t.Fatal(err)
		}
		if r := s.do("GET", "/api/v1/app/thread", t3, nil); r.status != 401 {
			t.Fatalf("revoked token accepted: %d", r.status)
		}
		if _, err := s.cli("token", "create", "--email", "nobody@acme.test"); err == nil {
			t.Fatal("token for an unknown user")
		}
		if _, err := s.cli("admin", "bootstrap", "--org", "acme"); err == nil {
			t.Fatal("bootstrap without --email accepted")
		}
		for _, args := range [][]string{{"serve", "--help"}, {"migrate", "--help"}, {"admin", "bootstrap", "--help"}, {"token", "create", "--help"}, {"token", "list", "--help"}, {"token", "revoke", "--help"}} {
			out, err := s.cli(args...)
			if (err != nil && err.Error() != "flag: help requested") || !strings.Contains(out, "Usage") {
				t.Fatalf("%v: %v %q", args, err, out)
			}
		}
	})
}

func TestBadConfigNamesTheVariable(t *testing.T) {
	cases := map[string]string{
		"LISTEN_ADDR":             "nonsense",
		"DATABASE_URL":            "mysql://x",
		"SANDBOX_IDLE":            "soon",
		"SANDBOX_BACKEND":         "docker,vmware",
		"MODEL_PROVIDER":          "gemini",
		"PUBLIC_URL":              "ftp://x",
		"THREADBOX_PROCS":         "0",
		"ORG_EMAIL_DOMAINS":       `{"localhost": "acme"}`,
		"EGRESS_RESPONSE_TIMEOUT": "soon",
		"EGRESS_TUNNEL_IDLE":      "0s",
	}
	for name, val := range cases {
		env := map[string]string{"DATA_DIR": t.TempDir(), name: val}
		err := run(context.Background(), []string{"migrate"}, func(k string) string { return env[k] }, &strings.Builder{}, &strings.Builder{})
		ce, ok := err.(*configError)
		if !ok || ce.name != name || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q: want one-line config error naming it, got %v", name, val, err)
		}
	}
}

func TestServeProcs(t *testing.T) {
	cases := []struct {
		env           map[string]string
		current, want int
	}{
		{nil, 16, 8}, // half the CPUs, leaving the rest to sandboxes
		{nil, 4, 2},  //
		{nil, 2, 2},  // but two where there are two: one queues every request behind the others
		{nil, 1, 1},  // never more than the runtime's, never zero
		{map[string]string{"THREADBOX_PROCS": "auto"}, 8, 4},
		{map[string]string{"THREADBOX_PROCS": "3"}, 8, 3},
		{map[string]string{"GOMAXPROCS": "6", "THREADBOX_PROCS": "3"}, 6, 6}, // the runtime's own variable wins
		{map[string]string{"THREADBOX_PROCS": "many"}, 8, 8},                 // run reports it
	}
	for _, c := range cases {
		if got := serveProcs(func(k string) string { return c.env[k] }, c.current); got != c.want {
			t.Errorf("env %v, runtime %d: procs %d, want %d", c.env, c.current, got, c.want)
		}
	}
}

// forge signs arbitrary claims and headers, for the attack table.
type forge struct {
	priv ed25519.PrivateKey
	kid  string
	pub  []byte // PEM of the public key
}

func loadForge(t *testing.T, s *server) forge {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "jwt-ed25519.pem"))
	if err != nil {
		t.Fatal(err)
	}
	priv, _, err := jwt.ParseKey(b)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(priv.Public())
	return forge{priv: priv, kid: jwt.New(priv, "", "").KeyID(), pub: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}
}

func TestAuthAttacks(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		good := s.bootstrap("acme", "admin@acme.test")
		f := loadForge(t, s)
		parsed, _, _ := gojwt.NewParser().ParseUnverified(good, gojwt.MapClaims{})
		base := parsed.Claims.(gojwt.MapClaims)
		claims := func(edit func(gojwt.MapClaims)) gojwt.MapClaims {
			c := gojwt.MapClaims{}
			for k, v := range base {
				c[k] = v
			}
			edit(c)
			return c
		}
		sign := func(c gojwt.MapClaims, kid string) string {
			tk := gojwt.NewWithClaims(gojwt.SigningMethodEdDSA, c)
			tk.Header["kid"] = kid
			out, err := tk.SignedString(f.priv)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		none := func() string {
			tk := gojwt.NewWithClaims(gojwt.SigningMethodNone, base)
			tk.Header["kid"] = f.kid
			out, _ := tk.SignedString(gojwt.UnsafeAllowNoneSignatureType)
			return out
		}
		hs := func() string {
			tk := gojwt.NewWithClaims(gojwt.SigningMethodHS256, base)
			tk.Header["kid"] = f.kid
			out, _ := tk.SignedString(f.pub)
			return out
		}
		// Control: a correctly re-signed copy of the real claims works.
		if r := s.do("GET", "/api/v1/app/project", sign(base, f.kid), nil); r.status != 200 {
			t.Fatalf("control token refused: %d %s", r.status, r.body)
		}
		// statusWith is the status of a request with this Authorization.
		statusWith := func(h string) int {
			req, _ := http.NewRequest("GET", s.base+"/api/v1/app/project", nil)
			req.Header.Set("Authorization", h)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		// The scheme's name is case-insensitive in HTTP.
		for _, h := range []string{"bearer " + good, "BEARER " + good, "  Bearer   " + good + " "} {
			if st := statusWith(h); st != 200 {
				t.Fatalf("Authorization %.12q…: %d", h, st)
			}
		}
		attacks := map[string]string{
			"alg none":           none(),
			"HS256 with pub key": hs(),
			"no exp":             sign(claims(func(c gojwt.MapClaims) { delete(c, "exp") }), f.kid),
			"expired":            sign(claims(func(c gojwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), f.kid),
			"wrong iss":          sign(claims(func(c gojwt.MapClaims) { c["iss"] = "evil" }), f.kid),
			"wrong aud":          sign(claims(func(c gojwt.MapClaims) { c["aud"] = []string{"other"} }), f.kid),
			"unknown kid":        sign(base, "0123456789abcdef"),
			"unknown jti":        sign(claims(func(c gojwt.MapClaims) { c["jti"] = "tok_nope" }), f.kid),
			"garbage":            "not.a.jwt",
			"empty":              "",
			"tampered signature": good[:len(good)-4] + "AAAA",
			"other user in sub":  sign(claims(func(c gojwt.MapClaims) { c["sub"] = "usr_other" }), f.kid),
			"no bearer prefix":   "Basic " + good,
		}
		for name, tok := range attacks {
			h := "Bearer " + tok
			if name == "no bearer prefix" {
				h = tok
			}
			if st := statusWith(h); st != 401 {
				t.Errorf("%s: want 401, got %d", name, st)
			}
		}
		// A header past the read buffer, up to a 1 MB Authorization, is
		// refused without being read whole: 431 in the error envelope (the
		// connection closes with a linger, so the client reads the answer),
		// and the server keeps serving.
		for _, n := range []int{20 << 10, 1 << 20, 8 << 20} {
			req, _ := http.NewRequest("GET", s.base+"/api/v1/app/project", nil)
			req.Header.Set("Authorization", "Bearer "+strings.Repeat("A", n))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("%d-byte header: %v", n, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if r := (response{resp.StatusCode, resp.Header, b}); r.status != 431 || r.errorType(t) != "invalid_request_error" {
				t.Errorf("%d-byte header: want 431 in the envelope, got %d %s", n, r.status, b)
			}
		}
		if r := s.do("GET", "/api/v1/app/project", good, nil); r.status != 200 {
			t.Fatalf("server unwell after a huge header: %d", r.status)
		}

		// Revoked token, disabled user, disabled org: refused on the next request.
		r := s.do("POST", "/api/v1/app/tokens", good, map[string]any{"name": "x"})
		tok := r.json(t)["token"].(string)
		tid := r.json(t)["id"].(string)
		if r := s.do("GET", "/api/v1/app/project", tok, nil); r.status != 200 {
			t.Fatalf("new token: %d", r.status)
		}
		if r := s.do("DELETE", "/api/v1/app/tokens/"+tid, good, nil); r.status != 204 {
			t.Fatalf("revoke: %d %s", r.status, r.body)
		}
		if r := s.do("GET", "/api/v1/app/project", tok, nil); r.status != 401 || r.errorType(t) != "authentication_error" {
			t.Fatalf("revoked token: %d %s", r.status, r.body)
		}

		r = s.do("POST", "/api/v1/app/org/users", good, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"})
		if r.status != 201 {
			t.Fatalf("create user: %d %s", r.status, r.body)
		}
		uid := r.json(t)["id"].(string)
		mtok := login(t, s, "m@acme.test", "member-password")
		if r := s.do("GET", "/api/v1/app/project", mtok, nil); r.status != 200 {
			t.Fatalf("member session: %d", r.status)
		}
		if r := s.do("PATCH", "/api/v1/app/org/users/"+uid, good, map[string]any{"disabled": true}); r.status != 200 {
			t.Fatalf("disable: %d %s", r.status, r.body)
		}
		if r := s.do("GET", "/api/v1/app/project", mtok, nil); r.status != 401 {
			t.Fatalf("disabled user: %d", r.status)
		}
		if r := s.do("POST", "/api/v1/app/auth/login", "", map[string]any{"email": "m@acme.test", "password": "member-password"}); r.status != 401 {
			t.Fatalf("disabled user login: %d", r.status)
		}

		st, err := store.Open(context.Background(), db, s.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		o, err := st.Accounts().OrgByName(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Accounts().UpdateOrg(context.Background(), o.WithDisabled(true)); err != nil {
			t.Fatal(err)
		}
		if r := s.do("GET", "/api/v1/app/project", good, nil); r.status != 401 {
			t.Fatalf("disabled org: %d", r.status)
		}
		_ = org.CodeExecution
	})
}

func login(t *testing.T, s *server, email, password string) string {
	t.Helper()
	r := s.do("POST", "/api/v1/app/auth/login", "", map[string]any{"email": email, "password": password})
	if r.status != 200 {
		t.Fatalf("login %s: %d %s", email, r.status, r.body)
	}
	return r.json(t)["token"].(string)
}

// TestEgressTimeSettings: EGRESS_RESPONSE_TIMEOUT and EGRESS_TUNNEL_IDLE set
// the proxy's two time limits, which default to the proxy's own.
func TestEgressTimeSettings(t *testing.T) {
	env := map[string]string{}
	c, err := loadEgressConfig(func(k string) string { return env[k] })
	if err != nil || c.ResponseTimeout != egressproxy.DefaultResponseHeaderTimeout || c.TunnelIdle != egressproxy.DefaultTunnelIdleTimeout {
		t.Fatalf("defaults: %v, %v, %v", c.ResponseTimeout, c.TunnelIdle, err)
	}
	env = map[string]string{"EGRESS_RESPONSE_TIMEOUT": "5m", "EGRESS_TUNNEL_IDLE": "1h"}
	c, err = loadEgressConfig(func(k string) string { return env[k] })
	if err != nil || c.ResponseTimeout != 5*time.Minute || c.TunnelIdle != time.Hour {
		t.Fatalf("set: %v, %v, %v", c.ResponseTimeout, c.TunnelIdle, err)
	}
}
