package egress

import (
	"strings"
	"testing"
	"time"

	"threadbox/domain/fault"
)

func TestCanonicalSecretHeader(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{in: "authorization", want: "Authorization"},
		{in: "X-API-KEY", want: "X-Api-Key"},
		{in: "x-goog-api-key", want: "X-Goog-Api-Key"},
		{in: "PRIVATE-TOKEN", want: "Private-Token"},
		{in: "", bad: true},
		{in: "X Api", bad: true},
		{in: "X-Api:", bad: true},
		{in: "Authorization\r\nX-Evil", bad: true},
		{in: "host", bad: true},
		{in: "Content-Length", bad: true},
		{in: "transfer-encoding", bad: true},
		{in: "Connection", bad: true},
		{in: "Proxy-Authorization", bad: true},
		{in: "upgrade", bad: true},
		{in: strings.Repeat("x", 65), bad: true},
		{in: "Ünicode", bad: true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := CanonicalSecretHeader(c.in)
			if c.bad {
				if !fault.Is(err, fault.Invalid) {
					t.Fatalf("CanonicalSecretHeader(%q) = %q, %v; want an invalid-input error", c.in, got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("CanonicalSecretHeader(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name   string
		secret string
		hosts  []string
		header string
		value  string
		bad    bool
	}{
		{name: "ok", secret: "deploy-token", hosts: []string{"api.example.com"}, header: "authorization", value: "Bearer s3cret"},
		{name: "wildcard and port", secret: "gh.v2", hosts: []string{"*.github.example:443", "api.example.com"}, header: "X-Token", value: "t\tab"},
		{name: "bad name", secret: "-x", hosts: []string{"api.example.com"}, header: "X-Token", value: "v", bad: true},
		{name: "name with slash", secret: "a/b", hosts: []string{"api.example.com"}, header: "X-Token", value: "v", bad: true},
		{name: "long name", secret: strings.Repeat("a", 65), hosts: []string{"api.example.com"}, header: "X-Token", value: "v", bad: true},
		{name: "no hosts", secret: "x", header: "X-Token", value: "v", bad: true},
		{name: "too many hosts", secret: "x", hosts: strings.Split(strings.Repeat("h.example,", MaxSecretHosts+1), ",")[:MaxSecretHosts+1], header: "X-Token", value: "v", bad: true},
		{name: "bad host", secret: "x", hosts: []string{"*.com"}, header: "X-Token", value: "v", bad: true},
		{name: "url as host", secret: "x", hosts: []string{"https://api.example.com"}, header: "X-Token", value: "v", bad: true},
		{name: "bad header", secret: "x", hosts: []string{"api.example.com"}, header: "Host", value: "v", bad: true},
		{name: "empty value", secret: "x", hosts: []string{"api.example.com"}, header: "X-Token", value: "", bad: true},
		{name: "line break in value", secret: "x", hosts: []string{"api.example.com"}, header: "X-Token", value: "a\r\nX-Evil: 1", bad: true},
		{name: "nul in value", secret: "x", hosts: []string{"api.example.com"}, header: "X-Token", value: "a\x00b", bad: true},
		{name: "padded value", secret: "x", hosts: []string{"api.example.com"}, header: "X-Token", value: " v", bad: true},
		{name: "long value", secret: "x", hosts: []string{"api.example.com"}, header: "X-Token", value: strings.Repeat("v", MaxSecretValueBytes+1), bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewSecret("org_1", c.secret, c.hosts, c.header, c.value, now)
			if c.bad {
				if !fault.Is(err, fault.Invalid) {
					t.Fatalf("NewSecret = %+v, %v; want an invalid-input error", s, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != c.secret || s.Value != c.value || !s.CreatedAt.Equal(now) || len(s.Hosts) != len(c.hosts) {
				t.Fatalf("NewSecret = %+v", s)
			}
		})
	}
}

func TestSecretsFor(t *testing.T) {
	mk := func(name, header string, hosts ...string) Secret {
		s, err := NewSecret("org_1", name, hosts, header, "v-"+name, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	all := []Secret{
		mk("b-api", "Authorization", "api.example.com"),
		mk("a-api", "Authorization", "api.example.com:443"),
		mk("key", "X-Key", "*.example.com"),
		mk("git", "Authorization", "git.example.org:8443"),
	}
	cases := []struct {
		host string
		port int
		want string
	}{
		{"api.example.com", 443, "a-api key"},
		{"api.example.com", 80, "b-api key"},
		{"API.Example.com.", 443, "a-api key"},
		{"x.example.com", 443, "key"},
		{"example.com", 443, ""},
		{"git.example.org", 443, ""},
		{"git.example.org", 8443, "git"},
		{"other.example", 443, ""},
	}
	for _, c := range cases {
		var names []string
		for _, s := range SecretsFor(all, c.host, c.port) {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, " "); got != c.want {
			t.Errorf("SecretsFor(%s:%d) = %q, want %q", c.host, c.port, got, c.want)
		}
	}
	if got := SecretRule("api.example.com", SecretsFor(all, "api.example.com", 443)); got != "api.example.com secret:a-api secret:key" {
		t.Errorf("SecretRule = %q", got)
	}
}
