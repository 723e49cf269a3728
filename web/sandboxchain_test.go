package web

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/auth"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// memAuth keeps one org, its users and their tokens in memory: what
// authenticating and issuing sandbox tokens use of auth.Store.
type memAuth struct {
	auth.Store // the rest: not used here
	mu         sync.Mutex
	org        org.Org
	users      map[string]user.User
	tokens     map[string]user.Token
}

func (m *memAuth) User(_ context.Context, id string) (user.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.users[id]; ok {
		return u, nil
	}
	return user.User{}, fault.New(fault.NotFound, "user not found")
}

func (m *memAuth) CreateToken(_ context.Context, t user.Token) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[t.ID()] = t
	return nil
}

func (m *memAuth) Token(_ context.Context, id string) (user.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.tokens[id]; ok {
		return t, nil
	}
	return user.Token{}, fault.New(fault.NotFound, "token not found")
}

func (m *memAuth) RevokeToken(_ context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[id] = m.tokens[id].Revoke(at)
	return nil
}

func (m *memAuth) RevokeUserTokens(_ context.Context, userID string, at time.Time) ([]user.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var revoked []user.Token
	for id, t := range m.tokens {
		if t.OwnerID() == userID && t.RevokedAt() == nil {
			m.tokens[id] = t.Revoke(at)
			revoked = append(revoked, m.tokens[id])
		}
	}
	return revoked, nil
}

func (m *memAuth) RevokedSandboxTokens(_ context.Context, userID string, at time.Time) ([]user.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var revoked []user.Token
	for _, t := range m.tokens {
		if t.OwnerID() == userID && t.Kind() == user.SandboxToken && t.RevokedAt() != nil && at.Before(t.ExpiresAt()) {
			revoked = append(revoked, t)
		}
	}
	return revoked, nil
}

func (m *memAuth) TouchToken(context.Context, string, time.Time) error { return nil }

func (m *memAuth) Credentials(ctx context.Context, id string) (user.Token, user.User, org.Org, error) {
	t, err := m.Token(ctx, id)
	if err != nil {
		return user.Token{}, user.User{}, org.Org{}, err
	}
	u, err := m.User(ctx, t.OwnerID())
	return t, u, m.org, err
}

// jsonCodec signs claims as plain JSON: the signature is not what this
// test is about.
type jsonCodec struct{}

func (jsonCodec) Sign(c auth.Claims) (string, error) {
	b, err := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b), err
}

func (jsonCodec) Verify(token string) (auth.Claims, error) {
	var c auth.Claims
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil && !time.Now().Before(c.ExpiresAt) {
		err = errors.New("expired")
	}
	return c, err
}

// oneMember returns an auth service over a store holding one org, acme,
// and its member u@acme.test (usr_1).
func oneMember() *auth.Service {
	t0 := time.Now().Add(-time.Hour)
	st := &memAuth{org: org.Restore("org_1", "acme", false, org.Policy{}, t0),
		users:  map[string]user.User{"usr_1": user.Restore("usr_1", "org_1", "u@acme.test", user.Member, false, "", t0)},
		tokens: map[string]user.Token{}}
	return auth.New(st, nil, jsonCodec{}, auth.Config{})
}

// TestNestedSandboxTokensEndWithTheirTurn: code in a turn's sandbox sends a
// Messages request with the turn's sandbox token, and the turn that request
// starts gets a sandbox token of its own. That token lasts no longer than
// the first and stops working when the first is revoked at the end of its
// turn: a request started from inside a sandbox (and kept running past
// its turn by a background process) cannot carry the sandbox's access to
// the API on after the turn, nor issue itself further tokens.
func TestNestedSandboxTokensEndWithTheirTurn(t *testing.T) {
	ctx := context.Background()
	a := oneMember()
	srv := New(Services{Auth: a}, slog.New(slog.DiscardHandler), Options{})
	srv.app.Handler() // builds the routes, as listening does

	// get sends GET /api/gpt/v1/models from inside container ctr_1's
	// sandbox and returns the status.
	get := func(token string) int {
		t.Helper()
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); srv.ServeSandboxConn(server, "ctr_1") }()
		defer func() { client.Close(); <-done }()
		go fmt.Fprintf(client, "GET /api/gpt/v1/models HTTP/1.1\r\nHost: 127.0.0.1:47800\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", token)
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	api := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_api", Kind: user.APIToken}
	outer, err := a.CreateSandboxToken(ctx, api, "ctr_1", 30*time.Minute) // the turn's token, as its first command gets it
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(ctx, outer.Token) // a Messages request of the turn's code
	if err != nil {
		t.Fatal(err)
	}
	nested, err := a.CreateSandboxToken(ctx, p, "ctr_1", 30*time.Minute) // the token of the turn it starts
	if err != nil {
		t.Fatal(err)
	}
	if nested.Record.ExpiresAt().After(outer.Record.ExpiresAt()) {
		t.Errorf("the nested turn's token expires at %v, after its parent's %v", nested.Record.ExpiresAt(), outer.Record.ExpiresAt())
	}
	if status := get(nested.Token); status != http.StatusOK {
		t.Fatalf("the nested turn's token while its parent's turn runs: %d, want 200", status)
	}
	pn, err := a.Authenticate(ctx, nested.Token)
	if err != nil {
		t.Fatal(err)
	}

	if err := a.Revoke(ctx, outer.Record.ID()); err != nil { // the first turn ends
		t.Fatal(err)
	}
	if status := get(outer.Token); status != http.StatusUnauthorized {
		t.Fatalf("the ended turn's token: %d, want 401", status)
	}
	if status := get(nested.Token); status != http.StatusUnauthorized {
		t.Errorf("the nested turn's token after its parent's turn ended: %d, want 401", status)
	}
	if _, err := a.CreateSandboxToken(ctx, pn, "ctr_1", 30*time.Minute); !strings.Contains(fmt.Sprint(err), "ended") {
		t.Errorf("a further token from the nested turn after its parent's ended: %v, want refused", err)
	}
}

// heldEngine runs every turn until its context ends or the test lets it
// go, handing the test each turn's context as it starts.
type heldEngine struct {
	started chan context.Context
	release chan struct{}
}

func (heldEngine) Validate(*wire.Request) (*messages.Plan, error) { return &messages.Plan{}, nil }

func (e heldEngine) Run(ctx context.Context, _ *wire.Request, _ messages.RunOptions, _ messages.Sink) error {
	e.started <- ctx
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-e.release:
		return errors.New("released by the test")
	}
}

// TestSandboxTurnsEndWithTheirTurn sends a Messages request from inside a
// sandbox with its turn's token, streamed and not, as a background process
// could keep one running: when the turn ends (its token is revoked), or
// the user is disabled or has their password reset (all their tokens are
// revoked at once), the request's turn is stopped with it, not run on to
// its end.
func TestSandboxTurnsEndWithTheirTurn(t *testing.T) {
	ends := map[string]func(ctx context.Context, a *auth.Service, tok auth.Issued) error{
		"turn ended": func(ctx context.Context, a *auth.Service, tok auth.Issued) error {
			return a.Revoke(ctx, tok.Record.ID())
		},
		"user disabled": func(ctx context.Context, a *auth.Service, tok auth.Issued) error {
			return a.RevokeUserTokens(ctx, tok.Record.OwnerID())
		},
	}
	for _, stream := range []bool{false, true} {
		for how, end := range ends {
			t.Run(fmt.Sprintf("stream=%v/%s", stream, how), func(t *testing.T) {
				ctx := context.Background()
				a := oneMember()
				eng := heldEngine{started: make(chan context.Context, 1), release: make(chan struct{})}
				srv := New(Services{Auth: a, Turns: turns.New(turns.Deps{Engine: eng, Containers: noContainers{}})}, slog.New(slog.DiscardHandler), Options{})
				srv.app.Handler()

				api := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_api", Kind: user.APIToken}
				tok, err := a.CreateSandboxToken(ctx, api, "ctr_1", 30*time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				client, server := net.Pipe()
				served := make(chan struct{})
				go func() { defer close(served); srv.ServeSandboxConn(server, "ctr_1") }()
				defer func() { client.Close(); <-served }()
				defer close(eng.release)
				body := fmt.Sprintf(`{"model":"m","max_tokens":5,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
				go fmt.Fprintf(client, "POST /api/gpt/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:47800\r\nAuthorization: Bearer %s\r\n"+
					"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", tok.Token, len(body), body)
				go func() { _, _ = io.Copy(io.Discard, client) }()
				turnCtx := <-eng.started
				if err := turnCtx.Err(); err != nil {
					t.Fatalf("the turn's context ended before its token was revoked: %v", err)
				}
				if err := end(ctx, a, tok); err != nil {
					t.Fatal(err)
				}
				if turnCtx.Err() == nil {
					t.Errorf("the request's turn runs on after its token was revoked (%s)", how)
				}
			})
		}
	}
}
