package user

import (
	"testing"
	"time"
)

func TestNewUserValidates(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		email string
		role  Role
		ok    bool
		want  string
	}{
		{"Admin@Acme.Test", Admin, true, "admin@acme.test"},
		{" m@acme.test ", Member, true, "m@acme.test"},
		{"not-an-email", Member, false, ""},
		{"Name <m@acme.test>", Member, false, ""},
		{"m@acme.test", "owner", false, ""},
	} {
		u, err := New("usr_1", "org_1", tc.email, tc.role, now)
		if (err == nil) != tc.ok || (tc.ok && u.Email() != tc.want) {
			t.Errorf("%q %q: %v %q", tc.email, tc.role, err, u.Email())
		}
	}
}

func TestTokenUsable(t *testing.T) {
	now := time.Now()
	tok, err := NewToken("tok_1", "usr_1", "org_1", "ci", APIToken, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Usable(now) || tok.Usable(now.Add(time.Hour)) {
		t.Fatal("expiry")
	}
	r := tok.Revoke(now.Add(time.Minute))
	if r.Usable(now.Add(2*time.Minute)) || !r.Revoke(now.Add(time.Hour)).RevokedAt().Equal(*r.RevokedAt()) {
		t.Fatal("revoke")
	}
	if _, err := NewToken("tok_2", "usr_1", "org_1", "", APIToken, now, 0); err == nil {
		t.Fatal("zero ttl accepted")
	}
	for _, name := range []string{"a\x00b", "caf\xe9"} {
		if _, err := NewToken("tok_3", "usr_1", "org_1", name, APIToken, now, time.Hour); err == nil {
			t.Fatalf("token name %q accepted", name)
		}
	}
}
