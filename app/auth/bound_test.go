package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"threadbox/domain/user"
)

// downStore holds one token and fails every revocation, as a database
// briefly unreachable would; the rest of Store is not used here.
type downStore struct {
	Store
	tok user.Token
}

func (s downStore) Token(context.Context, string) (user.Token, error) { return s.tok, nil }

func (s downStore) RevokeToken(context.Context, string, time.Time) error {
	return errors.New("store down")
}

// TestRevokeEndsBoundRequestsWhenTheStoreFails: a revocation the store
// fails to record still ends the requests bound to the token on this
// server at once, and the failure is returned for the caller to retry.
func TestRevokeEndsBoundRequestsWhenTheStoreFails(t *testing.T) {
	tok, err := user.NewToken("tok_1", "u1", "o1", "turn", user.SandboxToken, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := New(downStore{tok: tok}, nil, nil, Config{})
	p := user.Principal{UserID: "u1", OrgID: "o1", Kind: user.SandboxToken, TokenID: "tok_1"}
	bound, err := s.Bound(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(context.Background(), "tok_1"); err == nil {
		t.Fatal("a failed revocation reported success")
	}
	if bound.Err() == nil {
		t.Fatal("a request bound to the token runs on after its revocation")
	}
}
