package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"threadbox/infra/c2pa"
)

// The issuer settings: a key file, a signing hook (URL or command) or
// none, each with the chain it needs; a bad combination or value is a
// config error naming the variable.
func TestContentCredentialsSettings(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := c2pa.SelfSignedIssuer(dir, "op"); err != nil {
		t.Fatal(err)
	}
	chain, key := filepath.Join(dir, "c2pa-chain.pem"), filepath.Join(dir, "c2pa-key.pem")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		env  map[string]string
		bad  string // the variable a config error names, "" when accepted
	}{
		{"generated", nil, ""},
		{"key file", map[string]string{"C2PA_CERT_CHAIN": chain, "C2PA_KEY": key}, ""},
		{"sign url", map[string]string{"C2PA_CERT_CHAIN": chain, "C2PA_SIGN_URL": "http://127.0.0.1:9/sign"}, ""},
		{"sign command", map[string]string{"C2PA_CERT_CHAIN": chain, "C2PA_SIGN_COMMAND": "/usr/local/bin/kms-sign --key issuer"}, ""},
		{"tsa", map[string]string{"C2PA_TSA_URL": "http://127.0.0.1:9/tsa"}, ""},
		{"key without chain", map[string]string{"C2PA_KEY": key}, "C2PA_CERT_CHAIN"},
		{"chain without key", map[string]string{"C2PA_CERT_CHAIN": chain}, "C2PA_CERT_CHAIN"},
		{"key and hook", map[string]string{"C2PA_CERT_CHAIN": chain, "C2PA_KEY": key, "C2PA_SIGN_URL": "http://127.0.0.1:9/"}, "C2PA_KEY"},
		{"sign url not http", map[string]string{"C2PA_CERT_CHAIN": chain, "C2PA_SIGN_URL": "file:///key"}, "C2PA_SIGN_URL"},
		{"tsa not a url", map[string]string{"C2PA_TSA_URL": "tsa.example"}, "C2PA_TSA_URL"},
		{"chain not a chain", map[string]string{"C2PA_CERT_CHAIN": key, "C2PA_SIGN_URL": "http://127.0.0.1:9/"}, "C2PA_CERT_CHAIN"},
		{"unknown format", map[string]string{"C2PA_FORMATS": "png,bmp"}, "C2PA_FORMATS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := contentCredentials(func(k string) string { return tc.env[k] }, t.TempDir(), nil, log)
			ce, isConfig := err.(*configError)
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.bad != "" && (!isConfig || ce.name != tc.bad):
				t.Fatalf("err %v, want a config error naming %s", err, tc.bad)
			}
		})
	}
}

func TestParseFormats(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{{"", len(c2pa.Formats)}, {"all", len(c2pa.Formats)}, {"none", 0}, {"png, JPG ,mp4,heic", 4}} {
		got, err := parseFormats(tc.in)
		if err != nil || len(got) != tc.want {
			t.Errorf("%q: %v %v, want %d formats", tc.in, got, err, tc.want)
		}
	}
}
