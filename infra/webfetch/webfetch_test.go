package webfetch

import (
	"net/netip"
	"testing"
)

func TestPublic(t *testing.T) {
	tests := []struct {
		addr   string
		public bool
	}{
		{"1.1.1.1", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"fd00::1", false},
		{"fe80::1", false},
		{"::ffff:127.0.0.1", false},
		{"64:ff9b::7f00:1", false},
		{"2002:7f00:1::", false},
		{"224.0.0.1", false},
		{"255.255.255.255", false},
	}
	for _, tc := range tests {
		if got := Public(netip.MustParseAddr(tc.addr)); got != tc.public {
			t.Errorf("Public(%s) = %v, want %v", tc.addr, got, tc.public)
		}
	}
}

func TestParseAllow(t *testing.T) {
	got, err := ParseAllow(" 10.0.0.0/8, 192.168.1.7 ,fd00::1/64")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.168.1.7/32", "fd00::/64"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("prefix %d = %s, want %s", i, got[i], want[i])
		}
	}
	if _, err := ParseAllow("not-an-address"); err == nil {
		t.Error("a bad entry was accepted")
	}
}
