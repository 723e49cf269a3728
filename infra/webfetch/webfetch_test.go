package webfetch

import "testing"

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
