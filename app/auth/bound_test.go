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

// userTokensStore holds one user's tokens in memory and revokes them all
// at once, returning only those it revoked, as the database does; the rest
// of Store is not used here.
type userTokensStore struct {
	Store
	toks map[string]user.Token
}

func (s *userTokensStore) RevokeUserTokens(_ context.Context, _ string, at time.Time) ([]user.Token, error) {
	var out []user.Token
	for id, t := range s.toks {
		if t.RevokedAt() == nil {
			s.toks[id] = t.Revoke(at)
			out = append(out, s.toks[id])
		}
	}
	return out, nil
}

func (s *userTokensStore) RevokedSandboxTokens(_ context.Context, _ string, at time.Time) ([]user.Token, error) {
	var out []user.Token
	for _, t := range s.toks {
		if t.Kind() == user.SandboxToken && t.RevokedAt() != nil && at.Before(t.ExpiresAt()) {
			out = append(out, t)
		}
	}
	return out, nil
}

// flakyNotices fails its first notice, as a database briefly unreachable
// would, and records the tokens of the notices it sends.
type flakyNotices struct {
	failed bool
	sent   []string
}

func (n *flakyNotices) TokenRevoked(_ context.Context, id string) error {
	if !n.failed {
		n.failed = true
		return errors.New("notice failed")
	}
	n.sent = append(n.sent, id)
	return nil
}

// TestRetriedBulkRevocationTellsTheOtherServers: when the notice of a
// revocation of all of a user's tokens fails, the caller's retry, which
// finds the tokens revoked already, sends it.
func TestRetriedBulkRevocationTellsTheOtherServers(t *testing.T) {
	box, err := user.NewToken("tok_box", "u1", "o1", "turn", user.SandboxToken, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	api, err := user.NewToken("tok_api", "u1", "o1", "ci", user.APIToken, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	notices := &flakyNotices{}
	s := New(&userTokensStore{toks: map[string]user.Token{box.ID(): box, api.ID(): api}}, nil, nil, Config{Notices: notices})
	if err := s.RevokeUserTokens(context.Background(), "u1"); err == nil {
		t.Fatal("a revocation whose notice failed reported success")
	}
	if err := s.RevokeUserTokens(context.Background(), "u1"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if len(notices.sent) != 1 || notices.sent[0] != box.ID() {
		t.Fatalf("notices sent by the retry: %v, want the sandbox token %s", notices.sent, box.ID())
	}
}
