package c2pa

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/infra/c2pa/c2patest"
)

// The signing command of TestSigningHooks: this test binary, run again
// with C2PA_TEST_SIGN_KEY naming a PEM key, signs the digest on its
// standard input and writes r||s.
func TestMain(m *testing.M) {
	if keyFile := os.Getenv("C2PA_TEST_SIGN_KEY"); keyFile != "" {
		os.Exit(signCommand(keyFile))
	}
	os.Exit(m.Run())
}

func signCommand(keyFile string) int {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return 2
	}
	key, err := parseKey(b)
	if err != nil {
		return 2
	}
	digest, _ := io.ReadAll(os.Stdin)
	if len(digest) != 32 {
		os.Stderr.WriteString("want a 32-byte digest")
		return 1
	}
	r, s, err := ecdsa.Sign(rand.Reader, key, digest)
	if err != nil {
		return 1
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	os.Stdout.Write(out)
	return 0
}

// A signer whose key stays outside (an HTTP signing service answering
// DER, a command answering r||s) makes manifests that validate; a hook
// that fails, or signs with another key, fails the signing.
func TestSigningHooks(t *testing.T) {
	dir := t.TempDir()
	key, chain, _, err := SelfSignedIssuer(dir, "threadbox test")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var calls int
	signWith := key
	mode := "ok"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		digest, _ := io.ReadAll(r.Body)
		if mode == "fail" || len(digest) != 32 || r.Header.Get("X-Signature-Algorithm") != "ES256" {
			http.Error(w, "no", http.StatusBadGateway)
			return
		}
		sig, err := ecdsa.SignASN1(rand.Reader, signWith, digest)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(sig)
	}))
	defer srv.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("C2PA_TEST_SIGN_KEY", filepath.Join(dir, generatedKeyFile))
	cmdHook, err := NewCommandHook([]string{self}, 0)
	if err != nil {
		t.Fatal(err)
	}
	png := encodeImage(t, PNG)
	for _, tc := range []struct {
		name string
		hook SignHook
	}{
		{"http", NewHTTPHook(srv.URL, srv.Client())},
		{"command", cmdHook},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewHookSigner(tc.hook, chain, "1.2.3")
			if err != nil {
				t.Fatal(err)
			}
			before := calls
			signed := signBytes(t, s, png, PNG, Provenance{Org: "org_1"})
			if tc.name == "http" && calls-before != 1 {
				t.Errorf("the hook signed %d times for one file", calls-before)
			}
			r := c2patest.Validate(t, "image/png", signed)
			if r.ActiveManifest == "" || len(r.Failures()) > 0 || !r.Has("claimSignature.validated") {
				t.Fatalf("validation failures %+v\n%s", r.Failures(), r.Raw)
			}
		})
	}
	if calls == 0 {
		t.Fatal("the HTTP hook was never called")
	}
	s, err := NewHookSigner(NewHTTPHook(srv.URL, srv.Client()), chain, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ mode, want string }{{"fail", "502"}, {"other key", "does not verify"}} {
		mode = tc.mode
		if tc.mode == "other key" {
			signWith = other
		}
		if _, err := s.Sign(context.Background(), bytes.NewReader(png), int64(len(png)), PNG, Provenance{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("hook %s: %v, want an error with %q", tc.mode, err, tc.want)
		}
	}
	bad, _ := NewCommandHook([]string{self}, 0)
	t.Setenv("C2PA_TEST_SIGN_KEY", filepath.Join(dir, "missing.pem"))
	sb, _ := NewHookSigner(bad, chain, "")
	if _, err := sb.Sign(context.Background(), bytes.NewReader(png), int64(len(png)), PNG, Provenance{}); err == nil || !strings.Contains(err.Error(), "signing command") {
		t.Errorf("a failing command: %v", err)
	}
	if _, err := NewCommandHook(nil, 0); err == nil {
		t.Error("an empty command was accepted")
	}
}
