package egress

import (
	"context"
	"regexp"
	"strings"
	"time"

	"threadbox/domain/fault"
)

// Bounds of an org's egress secrets.
const (
	MaxSecrets          = 64
	MaxSecretHosts      = 16
	MaxSecretValueBytes = 8 << 10
)

// Secret is an org credential the egress proxy adds to requests for the
// hosts it is bound to, as one header (for example Authorization for one
// API host). Code in the sandbox never sees it: the proxy terminates TLS
// for those hosts and sets the header on the way out. Value is the plain
// value only while a secret is made or used by the proxy; a listing
// carries none. Sealed is the value as stored, encrypted.
type Secret struct {
	OrgID     string
	Name      string
	Hosts     []Pattern
	Header    string // canonical form ("Authorization", "X-Api-Key")
	Value     string
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

var secretName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidateSecretName checks a secret's name: 1 to 64 letters, digits,
// '_', '.' and '-', starting with a letter or digit.
func ValidateSecretName(name string) error {
	if !secretName.MatchString(name) {
		return fault.Errorf(fault.Invalid, "the secret name %q must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	return nil
}

// reservedHeaders are headers a secret may not set: those of the
// connection and the message's framing, which the proxy and the
// protocol own, and the proxy's own.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Expect": true,
}

// CanonicalSecretHeader checks a header name and returns its canonical
// form: an HTTP token (RFC 9110) of at most 64 characters that is not a
// connection, framing or Proxy- header.
func CanonicalSecretHeader(name string) (string, error) {
	if name == "" || len(name) > 64 {
		return "", fault.New(fault.Invalid, "a secret's header name must be 1-64 characters")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return "", fault.Errorf(fault.Invalid, "the header name %q is not an HTTP field name", name)
		}
	}
	c := canonicalHeader(name)
	if reservedHeaders[c] || strings.HasPrefix(c, "Proxy-") {
		return "", fault.Errorf(fault.Invalid, "a secret may not set the header %s: it belongs to the connection", c)
	}
	return c, nil
}

// isTokenChar reports whether b may appear in an HTTP token.
func isTokenChar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// canonicalHeader is net/textproto's canonical form of a valid token:
// each '-'-separated word starts upper-case, the rest lower-case.
func canonicalHeader(s string) string {
	b := []byte(strings.ToLower(s))
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		upper = c == '-'
	}
	return string(b)
}

// ValidateSecretValue checks a header value: 1 to MaxSecretValueBytes
// bytes, no control characters but tab, no space at either end.
func ValidateSecretValue(v string) error {
	if v == "" || len(v) > MaxSecretValueBytes {
		return fault.Errorf(fault.Invalid, "a secret's value must be 1-%d bytes", MaxSecretValueBytes)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return fault.New(fault.Invalid, "a secret's value may not hold control characters (line breaks included)")
		}
	}
	if strings.TrimSpace(v) != v {
		return fault.New(fault.Invalid, "a secret's value may not start or end with white space")
	}
	return nil
}

// NewSecret checks and makes an org's secret: its name, the host patterns
// it is bound to (1 to MaxSecretHosts, as in an allowlist), the header it
// sets and the value.
func NewSecret(orgID, name string, hosts []string, header, value string, now time.Time) (Secret, error) {
	if err := ValidateSecretName(name); err != nil {
		return Secret{}, err
	}
	if len(hosts) == 0 || len(hosts) > MaxSecretHosts {
		return Secret{}, fault.Errorf(fault.Invalid, "a secret is bound to 1-%d host patterns", MaxSecretHosts)
	}
	pats, err := ParsePatterns(hosts)
	if err != nil {
		return Secret{}, err
	}
	h, err := CanonicalSecretHeader(header)
	if err != nil {
		return Secret{}, err
	}
	if err := ValidateSecretValue(value); err != nil {
		return Secret{}, err
	}
	now = now.UTC()
	return Secret{OrgID: orgID, Name: name, Hosts: pats, Header: h, Value: value, CreatedAt: now, UpdatedAt: now}, nil
}

// Matches reports whether the secret is bound to host:port.
func (s Secret) Matches(host string, port int) bool {
	for _, p := range s.Hosts {
		if p.Matches(host, port) {
			return true
		}
	}
	return false
}

// HostStrings returns the secret's host patterns as written.
func (s Secret) HostStrings() []string {
	out := make([]string, len(s.Hosts))
	for i, p := range s.Hosts {
		out[i] = p.String()
	}
	return out
}

// SecretsFor returns the secrets bound to host:port, one per header: of
// two secrets setting the same header, the one whose name sorts first.
func SecretsFor(secrets []Secret, host string, port int) []Secret {
	var out []Secret
	for _, s := range secrets {
		if !s.Matches(host, port) {
			continue
		}
		dup := false
		for i, o := range out {
			if o.Header == s.Header {
				dup = true
				if s.Name < o.Name {
					out[i] = s
				}
			}
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// SecretRule is the ledger's rule for a connection allowed by rule whose
// requests carried the named secrets.
func SecretRule(rule string, secrets []Secret) string {
	for _, s := range secrets {
		rule += " secret:" + s.Name
	}
	return rule
}

// Secrets keeps orgs' secrets, their values sealed.
type Secrets interface {
	// PutEgressSecret creates or replaces the org's secret of s.Name
	// (keeping CreatedAt of one replaced); created says which.
	PutEgressSecret(ctx context.Context, s Secret) (created bool, err error)
	// DeleteEgressSecret removes the org's secret; fault.NotFound when none.
	DeleteEgressSecret(ctx context.Context, orgID, name string) error
	// EgressSecrets returns the org's secrets by name, values sealed.
	EgressSecrets(ctx context.Context, orgID string) ([]Secret, error)
}
