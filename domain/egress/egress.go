// Package egress holds the rules of a sandbox's outbound network: the host
// patterns an org allows, the operator's ceiling over them, and the
// decision for one destination (a host, a port and each address the host
// resolved to).
package egress

import (
	"net/netip"
	"strconv"
	"strings"

	"threadbox/domain/fault"
)

// MaxPatterns bounds an org's allowlist so a policy stays small enough to
// check on every connection.
const MaxPatterns = 256

// Pattern is one host pattern: an exact host ("pypi.example") or every
// subdomain of a suffix ("*.example"), optionally restricted to one port.
// A port of zero means any port.
type Pattern struct {
	host     string // lower-case, without the "*." of a wildcard
	wildcard bool
	port     int
}

// ParsePattern reads "host", "*.suffix", "host:port" or "*.suffix:port".
func ParsePattern(s string) (Pattern, error) {
	raw := strings.ToLower(strings.TrimSpace(s))
	if raw == "" {
		return Pattern{}, fault.New(fault.Invalid, "an egress pattern is empty")
	}
	var p Pattern
	host := raw
	// An IPv6 address takes brackets when it carries a port ("[::1]:443").
	if i := strings.LastIndexByte(raw, ':'); i >= 0 && (strings.Count(raw, ":") == 1 || strings.HasPrefix(raw, "[")) {
		port, err := strconv.Atoi(raw[i+1:])
		if err != nil || port < 1 || port > 65535 {
			return Pattern{}, fault.Errorf(fault.Invalid, "the egress pattern %q has no valid port (1-65535)", s)
		}
		host, p.port = raw[:i], port
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.HasPrefix(host, "*.") {
		p.wildcard, host = true, host[2:]
	}
	host, ok := NormalizeHost(host)
	if !ok {
		return Pattern{}, fault.Errorf(fault.Invalid, "the egress pattern %q is not a host name, a \"*.\" suffix or an IP address", s)
	}
	if p.wildcard && !strings.Contains(host, ".") {
		return Pattern{}, fault.Errorf(fault.Invalid, "the egress pattern %q matches a whole top-level domain", s)
	}
	if _, err := netip.ParseAddr(host); err == nil && p.wildcard {
		return Pattern{}, fault.Errorf(fault.Invalid, "the egress pattern %q puts a wildcard on an address", s)
	}
	p.host = host
	return p, nil
}

// NormalizeHost returns host as the rules compare it: lower-case, without
// a trailing dot, and an IP address in its one canonical form (an
// IPv4-mapped IPv6 address as IPv4, so "::ffff:192.0.2.1" and "192.0.2.1"
// are the same host). ok is false when host is neither an IP address
// (without a zone) nor a host name of ASCII letters, digits, '-' and '_'
// of at most 253 bytes: a name in another script is asked for in its
// punycode ("xn--") form, as clients send it.
func NormalizeHost(host string) (string, bool) {
	if len(host) > 255 { // a name and its trailing dot, or any address
		return "", false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", false
		}
		return a.Unmap().String(), true
	}
	if !validHost(host) {
		return "", false
	}
	return host, true
}

// String returns the pattern as it is written.
func (p Pattern) String() string {
	s := p.host
	if strings.Contains(s, ":") && p.port != 0 {
		s = "[" + s + "]"
	}
	if p.wildcard {
		s = "*." + s
	}
	if p.port != 0 {
		s += ":" + strconv.Itoa(p.port)
	}
	return s
}

// Matches reports whether host (a name or an address) and port fall under
// the pattern. A wildcard covers subdomains only, not the suffix itself.
//
// host is compared as NormalizeHost returns it, so an address matches
// whichever way it is written, and a host that is neither a name nor an
// address matches nothing. A wildcard never covers an address: "*.0.2.1"
// is not a pattern over "192.0.2.1".
func (p Pattern) Matches(host string, port int) bool {
	if p.port != 0 && p.port != port {
		return false
	}
	host, ok := NormalizeHost(host)
	if !ok {
		return false
	}
	if p.wildcard {
		if _, err := netip.ParseAddr(host); err == nil {
			return false
		}
		return strings.HasSuffix(host, "."+p.host)
	}
	return host == p.host
}

// ParsePatterns reads a list of patterns, dropping duplicates; the first
// bad one is the error.
func ParsePatterns(list []string) ([]Pattern, error) {
	if len(list) > MaxPatterns {
		return nil, fault.Errorf(fault.Invalid, "an egress allowlist holds at most %d patterns", MaxPatterns)
	}
	seen := map[string]bool{}
	out := make([]Pattern, 0, len(list))
	for _, s := range list {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, err
		}
		if !seen[p.String()] {
			seen[p.String()] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// Ceiling is the operator's bound over every org's allowlist: hosts no
// org may reach (EGRESS_DENY), and the private destinations that are
// reachable at all (EGRESS_ALLOW_PRIVATE, host patterns or CIDR prefixes).
// Private, loopback, link-local and other non-public addresses are refused
// unless listed there.
//
// A deny entry that is an address or a CIDR prefix refuses every name that
// resolves into it, not only the address asked for as such, so an
// operator can keep orgs off an address whatever name leads there (the
// install's own public address, say).
type Ceiling struct {
	deny         []Pattern
	denyPrefixes []netip.Prefix
	allowPrivate []netip.Prefix
	privateHosts []Pattern
}

// NewCeiling reads the operator's deny patterns (host patterns, addresses
// or CIDR prefixes) and private allowances.
func NewCeiling(deny, allowPrivate []string) (Ceiling, error) {
	var c Ceiling
	var patterns []string
	for _, s := range deny {
		if pfx, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
			c.denyPrefixes = append(c.denyPrefixes, unmapPrefix(pfx))
			continue
		}
		patterns = append(patterns, s)
	}
	d, err := ParsePatterns(patterns)
	if err != nil {
		return Ceiling{}, err
	}
	c.deny = d
	for _, s := range allowPrivate {
		s = strings.TrimSpace(s)
		if pfx, err := netip.ParsePrefix(s); err == nil {
			c.allowPrivate = append(c.allowPrivate, pfx.Masked())
			continue
		}
		if a, err := netip.ParseAddr(s); err == nil {
			c.allowPrivate = append(c.allowPrivate, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := ParsePattern(s)
		if err != nil {
			return Ceiling{}, fault.Errorf(fault.Invalid, "EGRESS_ALLOW_PRIVATE: %q is neither an address, a prefix nor a host pattern", s)
		}
		c.privateHosts = append(c.privateHosts, p)
	}
	return c, nil
}

// Policy is one org's egress setting as the proxy reads it per connection.
type Policy struct {
	On    bool
	Allow []Pattern
	// Secrets are the org's secrets with their values, which the proxy
	// adds to requests for their hosts.
	Secrets []Secret
}

// Verdict says what happens to one connection and why. Rule is the
// pattern or the reason that decided it, as the ledger records it;
// Address is the resolved address that refused it, when one did (not
// always the first the name resolved to).
type Verdict struct {
	Allowed bool
	Rule    string
	Reason  string
	Address netip.Addr
}

// Rules named in verdicts that no pattern decided.
const (
	RuleOff        = "egress-off"
	RuleNoMatch    = "no-match"
	RulePrivate    = "private-address"
	RuleNoAddress  = "no-address"
	RuleCeilingPre = "operator-deny:"
)

// Decide returns the verdict for host:port, whose name resolved to addrs
// (the proxy resolves it itself and dials only the addresses allowed here,
// so a name that resolves to a private address is refused whatever
// the allowlist says). Every address must pass: one refused address
// refuses the connection.
func Decide(c Ceiling, p Policy, host string, port int, addrs []netip.Addr) Verdict {
	if !p.On {
		return Verdict{Rule: RuleOff, Reason: "outbound network is off for this organization"}
	}
	for _, d := range c.deny {
		if d.Matches(host, port) {
			return Verdict{Rule: RuleCeilingPre + d.String(), Reason: "the operator does not allow " + host}
		}
	}
	var rule string
	for _, a := range p.Allow {
		if a.Matches(host, port) {
			rule = a.String()
			break
		}
	}
	if rule == "" {
		return Verdict{Rule: RuleNoMatch, Reason: host + ":" + strconv.Itoa(port) + " is not in the organization's egress allowlist"}
	}
	if len(addrs) == 0 {
		return Verdict{Rule: RuleNoAddress, Reason: host + " resolved to no address"}
	}
	for _, ad := range addrs {
		ad = ad.Unmap()
		if rule, denied := c.deniesAddress(ad, port); denied {
			return Verdict{Rule: RuleCeilingPre + rule, Reason: "the operator does not allow " + ad.String() + ", which " + host + " resolved to", Address: ad}
		}
		if Public(ad) || c.privateAllowed(host, port, ad) {
			continue
		}
		return Verdict{Rule: RulePrivate, Reason: host + " resolved to the non-public address " + ad.String(), Address: ad}
	}
	return Verdict{Allowed: true, Rule: rule}
}

// deniesAddress reports whether the operator's deny list covers the
// address a at port, and the entry that does.
func (c Ceiling) deniesAddress(a netip.Addr, port int) (string, bool) {
	for _, pfx := range c.denyPrefixes {
		if pfx.Contains(a) {
			return pfx.String(), true
		}
	}
	for _, d := range c.deny {
		if !d.wildcard && d.Matches(a.String(), port) {
			return d.String(), true
		}
	}
	return "", false
}

// unmapPrefix writes an IPv4-mapped prefix as the IPv4 prefix it covers,
// since addresses are compared unmapped.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

func (c Ceiling) privateAllowed(host string, port int, a netip.Addr) bool {
	for _, pfx := range c.allowPrivate {
		if pfx.Contains(a) {
			return true
		}
	}
	for _, p := range c.privateHosts {
		if p.Matches(host, port) {
			return true
		}
	}
	return false
}

// nonPublic lists the ranges that are not the public internet beyond what
// netip's predicates cover: shared address space, benchmarking, documentation,
// IPv4/IPv6 translation and the reserved blocks.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),        // IPv4-compatible (deprecated): embeds an IPv4 address
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64: may embed an internal IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"), // Teredo: embeds IPv4 addresses
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("3fff::/20"), // documentation
	netip.MustParsePrefix("2002::/16"), // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("fc00::/7"),
}

// Public reports whether a is a globally routable unicast address: not
// loopback, private, link-local, multicast, unspecified or reserved.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() ||
		a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
