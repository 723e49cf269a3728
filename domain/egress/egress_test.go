package egress

import (
	"net/netip"
	"strings"
	"testing"

	"threadbox/domain/fault"
)

func TestParsePattern(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{in: "PyPI.Example", want: "pypi.example"},
		{in: "*.example.org", want: "*.example.org"},
		{in: "git.example:443", want: "git.example:443"},
		{in: "*.example.org:8443", want: "*.example.org:8443"},
		{in: "203.0.113.7", want: "203.0.113.7"},
		{in: "[2001:db8::1]:443", want: "[2001:db8::1]:443"},
		{in: "2001:db8::1", want: "2001:db8::1"},
		{in: "2001:0DB8:0::1", want: "2001:db8::1"},
		{in: "::ffff:203.0.113.7", want: "203.0.113.7"},
		{in: "pypi.example.", want: "pypi.example"},
		{in: "fe80::1%eth0", bad: true},
		{in: "b\u00fccher.example", bad: true},
		{in: "", bad: true},
		{in: "*", bad: true},
		{in: "*.com", bad: true},
		{in: "*.10.0.0.1", bad: true},
		{in: "host:0", bad: true},
		{in: "host:65536", bad: true},
		{in: "host:http", bad: true},
		{in: "-bad.example", bad: true},
		{in: "a..example", bad: true},
		{in: "exa mple.org", bad: true},
		{in: "http://example.org", bad: true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			p, err := ParsePattern(c.in)
			if c.bad {
				if !fault.Is(err, fault.Invalid) {
					t.Fatalf("ParsePattern(%q) = %v, %v; want an invalid-input error", c.in, p, err)
				}
				return
			}
			if err != nil || p.String() != c.want {
				t.Fatalf("ParsePattern(%q) = %q, %v; want %q", c.in, p.String(), err, c.want)
			}
		})
	}
}

func TestPatternMatches(t *testing.T) {
	cases := []struct {
		pattern, host string
		port          int
		want          bool
	}{
		{"pypi.example", "pypi.example", 443, true},
		{"pypi.example", "PYPI.example.", 80, true},
		{"pypi.example", "files.pypi.example", 443, false},
		{"pypi.example", "pypi.example.evil", 443, false},
		{"*.example.org", "a.example.org", 443, true},
		{"*.example.org", "a.b.example.org", 443, true},
		{"*.example.org", "example.org", 443, false},
		{"*.example.org", "badexample.org", 443, false},
		{"git.example:443", "git.example", 443, true},
		{"git.example:443", "git.example", 22, false},
		{"203.0.113.7", "::ffff:203.0.113.7", 80, true},
		{"::ffff:203.0.113.7", "203.0.113.7", 80, true},
		{"2001:db8::1", "2001:0db8:0:0::1", 443, true},
		{"2001:db8::1", "fe80::1%eth0", 443, false},
		{"*.0.113.7", "203.0.113.7", 443, false},
		{"*.example.org", "b\u00fccher.example.org", 443, false},
		{"*.example.org", "a\x00.example.org", 443, false},
		{"*.example.org", "a..example.org", 443, false},
		{"*.example.org", strings.Repeat("a.", 200) + "example.org", 443, false},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Matches(c.host, c.port); got != c.want {
			t.Errorf("%s matches %s:%d = %v, want %v", c.pattern, c.host, c.port, got, c.want)
		}
	}
}

func TestParsePatternsBounds(t *testing.T) {
	ps, err := ParsePatterns([]string{"a.example", "A.example", "b.example"})
	if err != nil || len(ps) != 2 {
		t.Fatalf("duplicates: got %v, %v; want two patterns", ps, err)
	}
	many := make([]string, MaxPatterns+1)
	for i := range many {
		many[i] = "a.example"
	}
	if _, err := ParsePatterns(many); !fault.Is(err, fault.Invalid) {
		t.Fatalf("%d patterns: err = %v, want invalid", len(many), err)
	}
	if _, err := ParsePatterns([]string{"ok.example", "*"}); !fault.Is(err, fault.Invalid) {
		t.Fatalf("a bad pattern in the list: err = %v, want invalid", err)
	}
}

// TestDecideNamesTheRefusedAddress checks that a refusal caused by one of
// several resolved addresses names that address, not the first.
func TestDecideNamesTheRefusedAddress(t *testing.T) {
	ceiling, err := NewCeiling([]string{"93.184.216.7"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	allow, err := ParsePatterns([]string{"pypi.example"})
	if err != nil {
		t.Fatal(err)
	}
	on := Policy{On: true, Allow: allow}
	first := netip.MustParseAddr("93.184.216.34")
	for _, refused := range []string{"10.0.0.3", "93.184.216.7", "::ffff:127.0.0.1"} {
		v := Decide(ceiling, on, "pypi.example", 443, []netip.Addr{first, netip.MustParseAddr(refused)})
		if want := netip.MustParseAddr(refused).Unmap(); v.Allowed || v.Address != want {
			t.Fatalf("%s after %s: %+v; want refused naming %s", refused, first, v, want)
		}
	}
	if v := Decide(ceiling, on, "other.example", 443, []netip.Addr{first}); v.Allowed || v.Address.IsValid() {
		t.Fatalf("a refusal no address caused names one: %+v", v)
	}
}

func TestDecide(t *testing.T) {
	ceiling, err := NewCeiling([]string{"*.internal.example", "metadata.example", "151.101.0.0/16", "93.184.216.7", "93.184.216.99:22", "::ffff:151.102.0.0/112"}, []string{"10.9.0.0/16", "registry.lan", "192.168.5.5"})
	if err != nil {
		t.Fatal(err)
	}
	allow, err := ParsePatterns([]string{"pypi.example", "*.internal.example", "metadata.example", "git.example:443", "registry.lan", "*.corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	on := Policy{On: true, Allow: allow}
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	addrs := func(s ...string) []netip.Addr {
		out := make([]netip.Addr, len(s))
		for i, a := range s {
			out[i] = netip.MustParseAddr(a)
		}
		return out
	}
	cases := []struct {
		name   string
		policy Policy
		host   string
		port   int
		addrs  []netip.Addr
		allow  bool
		rule   string
	}{
		{"feature off", Policy{Allow: allow}, "pypi.example", 443, pub, false, RuleOff},
		{"allowed", on, "pypi.example", 443, pub, true, "pypi.example"},
		{"not listed", on, "other.example", 443, pub, false, RuleNoMatch},
		{"port restricted", on, "git.example", 22, pub, false, RuleNoMatch},
		{"port allowed", on, "git.example", 443, pub, true, "git.example:443"},
		{"operator ceiling over a wildcard", on, "db.internal.example", 443, pub, false, "operator-deny:*.internal.example"},
		{"operator ceiling over an exact host", on, "metadata.example", 80, pub, false, "operator-deny:metadata.example"},
		{"rebinding to loopback", on, "pypi.example", 443, addrs("127.0.0.1"), false, RulePrivate},
		{"one private address among public ones", on, "pypi.example", 443, addrs("93.184.216.34", "10.0.0.3"), false, RulePrivate},
		{"IPv4-mapped loopback", on, "pypi.example", 443, addrs("::ffff:127.0.0.1"), false, RulePrivate},
		{"link-local metadata address", on, "a.corp.example", 80, addrs("169.254.169.254"), false, RulePrivate},
		{"IPv6 unique local", on, "a.corp.example", 443, addrs("fd00::1"), false, RulePrivate},
		{"shared address space", on, "a.corp.example", 443, addrs("100.64.1.1"), false, RulePrivate},
		{"operator-allowed private prefix", on, "a.corp.example", 443, addrs("10.9.3.4"), true, "*.corp.example"},
		{"operator-allowed private address", on, "a.corp.example", 443, addrs("192.168.5.5"), true, "*.corp.example"},
		{"operator-allowed private host", on, "registry.lan", 5000, addrs("192.168.1.9"), true, "registry.lan"},
		{"no address", on, "pypi.example", 443, nil, false, RuleNoAddress},
		{"a name resolving to an operator-denied address", on, "pypi.example", 443, addrs("93.184.216.34", "93.184.216.7"), false, "operator-deny:93.184.216.7"},
		{"a name resolving into an operator-denied prefix", on, "pypi.example", 443, addrs("151.101.1.20"), false, "operator-deny:151.101.0.0/16"},
		{"an IPv4-mapped address in an operator-denied prefix", on, "pypi.example", 443, addrs("::ffff:151.101.1.20"), false, "operator-deny:151.101.0.0/16"},
		{"an operator-denied mapped prefix", on, "pypi.example", 443, addrs("151.102.3.4"), false, "operator-deny:151.102.0.0/16"},
		{"an operator-denied address at another port", on, "pypi.example", 443, addrs("93.184.216.99"), true, "pypi.example"},
		{"an operator-denied address at its port", on, "a.corp.example", 22, addrs("93.184.216.99"), false, "operator-deny:93.184.216.99:22"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(ceiling, c.policy, c.host, c.port, c.addrs)
			if v.Allowed != c.allow || v.Rule != c.rule {
				t.Fatalf("Decide(%s:%d %v) = %+v; want allowed=%v rule=%q", c.host, c.port, c.addrs, v, c.allow, c.rule)
			}
			if !v.Allowed && v.Reason == "" {
				t.Fatalf("a refusal without a reason: %+v", v)
			}
		})
	}
}

func TestNewCeilingRejectsBadInput(t *testing.T) {
	for _, c := range []struct{ deny, private []string }{
		{deny: []string{"*"}},
		{private: []string{"not a host!"}},
	} {
		if _, err := NewCeiling(c.deny, c.private); !fault.Is(err, fault.Invalid) {
			t.Errorf("NewCeiling(%v, %v) = %v; want invalid", c.deny, c.private, err)
		}
	}
}

func TestPublic(t *testing.T) {
	cases := map[string]bool{
		"93.184.216.34": true, "2606:4700::1": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.0.1": false,
		"169.254.169.254": false, "0.0.0.0": false, "224.0.0.1": false, "255.255.255.255": false,
		"::1": false, "fe80::1": false, "fd12::1": false, "::ffff:10.0.0.1": false, "2001:db8::5": false,
		"198.18.0.1": false, "100.100.100.100": false,
		"1.1.1.1": true, "2606:4700::1111": true, "::": false, "fd00::1": false,
		"100.64.0.1": false, "::ffff:127.0.0.1": false, "64:ff9b::7f00:1": false, "2002:7f00:1::": false,
		"::127.0.0.1": false, "::169.254.169.254": false, "2001:0:4136:e378:8000:63bf:3fff:fdd2": false,
		"3fff::1": false, "2001:4860:4860::8888": true,
	}
	for s, want := range cases {
		if got := Public(netip.MustParseAddr(s)); got != want {
			t.Errorf("Public(%s) = %v, want %v", s, got, want)
		}
	}
}
