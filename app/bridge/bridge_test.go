package bridge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// fakeBackend listens on the host's loopback for the sandbox, as a
// backend that forwards connections does.
type fakeBackend struct {
	mu       sync.Mutex
	listened []string
}

func (b *fakeBackend) Listen(_ context.Context, _ string, addr string) (net.Listener, error) {
	b.mu.Lock()
	b.listened = append(b.listened, addr)
	b.mu.Unlock()
	return net.Listen("tcp", "127.0.0.1:0")
}

func TestParseServices(t *testing.T) {
	tests := []struct {
		in   string
		want []Service
		bad  bool
	}{
		{in: "", want: nil},
		{in: "search=10.0.0.5:9200", want: []Service{{"search", "10.0.0.5:9200"}}},
		{in: " db = db.internal:5432 , cache=127.0.0.1:6379,", want: []Service{{"db", "db.internal:5432"}, {"cache", "127.0.0.1:6379"}}},
		{in: "noaddr", bad: true},
		{in: "x=host", bad: true},
		{in: "1bad=h:1", bad: true},
		{in: "a=h:1,A=h:2", bad: true},
	}
	for _, tc := range tests {
		got, err := ParseServices(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseServices(%q) accepted", tc.in)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseServices(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestBridgeEnv(t *testing.T) {
	b := New(nil, Config{APIPort: 5000, Services: []Service{{"search-db", "h:1"}, {"cache", "h:2"}}})
	got := b.Env("tok", "claude")
	want := []string{
		"ANTHROPIC_BASE_URL=http://127.0.0.1:5000/api/gpt", "ANTHROPIC_AUTH_TOKEN=tok", "ANTHROPIC_MODEL=claude",
		"SANDBOX_SERVICE_SEARCH_DB=127.0.0.1:5001", "SANDBOX_SERVICE_CACHE=127.0.0.1:5002",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("env %v", got)
	}
}

// dial connects to a listener of the fake backend (a real loopback
// listener on the host).
func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// recordingBackend is a fakeBackend that keeps the listeners it made.
type recordingBackend struct {
	*fakeBackend
	mu        sync.Mutex
	listeners []net.Listener
}

func (r *recordingBackend) Listen(ctx context.Context, id, addr string) (net.Listener, error) {
	l, err := r.fakeBackend.Listen(ctx, id, addr)
	if err == nil {
		r.mu.Lock()
		r.listeners = append(r.listeners, l)
		r.mu.Unlock()
	}
	return l, err
}

func TestBridgeServesAndForwards(t *testing.T) {
	// An allowed service on the host: answers each line upper-cased.
	svc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, strings.ToUpper(line))
			}()
		}
	}()
	rb := &recordingBackend{fakeBackend: &fakeBackend{}}
	served := make(chan string, 4)
	serve := func(c net.Conn, containerID string) {
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, containerID+":"+line)
		served <- containerID
	}
	b := New(serve, Config{APIPort: 47800, Services: []Service{{"upper", svc.Addr().String()}}})
	ctx := context.Background()
	if err := b.Boot(ctx, rb, "c1"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rb.listened, []string{"127.0.0.1:47800", "127.0.0.1:47801"}) {
		t.Fatalf("listened on %v", rb.listened)
	}
	defer func() {
		for _, l := range rb.listeners {
			l.Close()
		}
	}()
	api := dial(t, rb.listeners[0])
	_, _ = io.WriteString(api, "GET\n")
	if got, _ := bufio.NewReader(api).ReadString('\n'); got != "c1:GET\n" {
		t.Fatalf("API connection answered %q", got)
	}
	up := dial(t, rb.listeners[1])
	_, _ = io.WriteString(up, "hello\n")
	if got, _ := bufio.NewReader(up).ReadString('\n'); got != "HELLO\n" {
		t.Fatalf("service connection answered %q", got)
	}
}

// plainBackend cannot forward connections.
type plainBackend struct{ fakeBackend }

func (*plainBackend) Listen(context.Context, string, string) (net.Listener, error) {
	return nil, fmt.Errorf("plain: %w", sandbox.ErrUnsupported)
}

// failingBackend fails its second listen: the first listener is closed.
type failingBackend struct{ recordingBackend }

func (f *failingBackend) Listen(ctx context.Context, id, addr string) (net.Listener, error) {
	if len(f.listeners) == 1 {
		return nil, errors.New("no room")
	}
	return f.recordingBackend.Listen(ctx, id, addr)
}

func TestBridgeBootWithoutForwarding(t *testing.T) {
	if err := New(nil, Config{}).Boot(context.Background(), &plainBackend{}, "c1"); err != nil {
		t.Fatalf("a backend that cannot forward: %v, want no error (and no listener)", err)
	}
	fb := &failingBackend{recordingBackend{fakeBackend: &fakeBackend{}}}
	err := New(nil, Config{Services: []Service{{"x", "h:1"}}}).Boot(context.Background(), fb, "c1")
	if err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("failed listen: %v", err)
	}
	if _, aerr := fb.listeners[0].Accept(); !errors.Is(aerr, net.ErrClosed) {
		t.Fatalf("the first listener stayed open after a failed boot: %v", aerr)
	}
}

// fakeTokens records issued and revoked tokens.
type fakeTokens struct {
	mu      sync.Mutex
	issued  []string // containerID/userID
	revoked []string
	fail    bool
}

func (f *fakeTokens) IssueSandboxToken(_ context.Context, p user.Principal, containerID string, ttl time.Duration) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return "", "", errors.New("store down")
	}
	if ttl != DefaultTokenTTL {
		return "", "", errors.New("unexpected ttl")
	}
	f.issued = append(f.issued, containerID+"/"+p.UserID)
	return "jwt-" + containerID, "tok_1", nil
}

func (f *fakeTokens) Revoke(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, id)
	return nil
}

func TestTurnEnv(t *testing.T) {
	tokens := &fakeTokens{}
	te := NewTurnEnv(tokens, New(nil, Config{}), 0)
	ctx := context.Background()

	// A turn that runs no command issues no token and revokes nothing.
	_, end := te.Begin(user.Principal{UserID: "u1"}, "c9", "claude-x")
	end()
	if len(tokens.issued) != 0 || len(tokens.revoked) != 0 {
		t.Fatalf("idle turn: issued %v revoked %v", tokens.issued, tokens.revoked)
	}

	// The first command issues the token; later ones reuse it.
	env, end := te.Begin(user.Principal{UserID: "u1"}, "c9", "claude-x")
	vars, err := env(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(vars, "ANTHROPIC_AUTH_TOKEN=jwt-c9") || !slices.Contains(vars, "ANTHROPIC_MODEL=claude-x") || !slices.Equal(tokens.issued, []string{"c9/u1"}) {
		t.Fatalf("env %v issued %v", vars, tokens.issued)
	}
	if again, err := env(ctx); err != nil || !slices.Equal(again, vars) || len(tokens.issued) != 1 {
		t.Fatalf("second call: %v %v, issued %v", again, err, tokens.issued)
	}
	if len(tokens.revoked) != 0 {
		t.Fatal("revoked before the turn ended")
	}
	end()
	if !slices.Equal(tokens.revoked, []string{"tok_1"}) {
		t.Fatalf("revoked %v", tokens.revoked)
	}
	if _, err := env(ctx); err == nil {
		t.Fatal("env after the turn ended")
	}

	tokens.fail = true
	env, end = te.Begin(user.Principal{UserID: "u1"}, "c9", "")
	defer end()
	if _, err := env(ctx); err == nil {
		t.Fatal("a failed issue gave an env")
	}
}

// TestBridgeConnectionLimit: past MaxConns open connections of a sandbox
// (API and services together) a new one is closed at once; once one ends,
// the next is served again.
func TestBridgeConnectionLimit(t *testing.T) {
	rb := &recordingBackend{fakeBackend: &fakeBackend{}}
	release := make(chan struct{})
	var mu sync.Mutex
	busy := 0
	serve := func(c net.Conn, _ string) {
		mu.Lock()
		busy++
		mu.Unlock()
		_, _ = io.WriteString(c, "served\n")
		<-release
	}
	b := New(serve, Config{APIPort: 47800, MaxConns: 3})
	if err := b.Boot(context.Background(), rb, "c1"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range rb.listeners {
			l.Close()
		}
	}()
	read := func(c net.Conn) string {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "closed"
		}
		return line
	}
	tests := []struct {
		name string
		want string
	}{
		{"first", "served\n"},
		{"second", "served\n"},
		{"third", "served\n"},
		{"fourth, over the limit", "closed"},
		{"fifth, over the limit", "closed"},
	}
	for _, tc := range tests {
		if got := read(dial(t, rb.listeners[0])); got != tc.want {
			t.Fatalf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	close(release) // the three served connections end
	deadline := time.Now().Add(5 * time.Second)
	for {
		if got := read(dial(t, rb.listeners[0])); got == "served\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the busy connections ended: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if busy != 4 {
		t.Fatalf("%d connections were served, want 4", busy)
	}
}

// TestBridgeCarriesEgress: with an egress handler the bridge listens on
// the port below the API's, hands it each connection with the container
// it listens for, and points the proxy variables at it.
func TestBridgeCarriesEgress(t *testing.T) {
	rb := &recordingBackend{fakeBackend: &fakeBackend{}}
	egress := func(c net.Conn, containerID string) {
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "proxy for "+containerID+": "+line)
	}
	b := New(func(c net.Conn, _ string) { c.Close() }, Config{APIPort: 47800, Egress: egress})
	if err := b.Boot(context.Background(), rb, "c9"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range rb.listeners {
			l.Close()
		}
	}()
	if !slices.Equal(rb.listened, []string{"127.0.0.1:47800", "127.0.0.1:47799"}) {
		t.Fatalf("listened on %v", rb.listened)
	}
	c := dial(t, rb.listeners[1])
	_, _ = io.WriteString(c, "CONNECT x:443\n")
	if got, _ := bufio.NewReader(c).ReadString('\n'); got != "proxy for c9: CONNECT x:443\n" {
		t.Fatalf("egress connection answered %q", got)
	}
	env := b.Env("tok", "")
	for _, want := range []string{"HTTPS_PROXY=http://127.0.0.1:47799", "http_proxy=http://127.0.0.1:47799", "NO_PROXY=localhost,127.0.0.1,::1"} {
		if !slices.Contains(env, want) {
			t.Fatalf("env %v lacks %s", env, want)
		}
	}
	if env := New(nil, Config{}).Env("tok", ""); slices.ContainsFunc(env, func(s string) bool { return strings.Contains(s, "PROXY") }) {
		t.Fatalf("proxy variables without a proxy: %v", env)
	}
}

// flakyTokens is a token store whose first failures revokes fail, as a
// database briefly unreachable would, with failWith (nil: a store that is
// down).
type flakyTokens struct {
	mu       sync.Mutex
	failures int
	failWith error
	attempts int
	revoked  map[string]bool
}

func (f *flakyTokens) IssueSandboxToken(_ context.Context, _ user.Principal, containerID string, _ time.Duration) (string, string, error) {
	return "jwt-" + containerID, "tok_1", nil
}

func (f *flakyTokens) Revoke(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.failures > 0 {
		f.failures--
		if f.failWith != nil {
			return f.failWith
		}
		return errors.New("store down")
	}
	if f.revoked == nil {
		f.revoked = map[string]bool{}
	}
	f.revoked[id] = true
	return nil
}

// usable reports whether the token still works: it is not revoked.
func (f *flakyTokens) usable(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.revoked[id]
}

// TestTurnEnvRetriesRevoke: a revocation at a turn's end that fails is
// retried, so the token of the finished turn ends revoked instead of
// staying usable until it expires.
func TestTurnEnvRetriesRevoke(t *testing.T) {
	tokens := &flakyTokens{failures: 3}
	te := NewTurnEnv(tokens, New(nil, Config{}), 0)
	te.backoffMin, te.backoffMax = time.Millisecond, time.Millisecond
	env, end := te.Begin(user.Principal{UserID: "u1"}, "c9", "claude-x")
	if _, err := env(context.Background()); err != nil {
		t.Fatal(err)
	}
	end()
	te.Finish(context.Background())
	if tokens.usable("tok_1") {
		t.Fatalf("the token is usable after its turn ended (%d revoke attempts)", tokens.attempts)
	}
	if tokens.attempts != 4 {
		t.Fatalf("%d revoke attempts, want 4", tokens.attempts)
	}
}

// endOneTurn issues a turn's token, ends the turn and finishes the
// TurnEnv, with retries over 20 ms; it returns what was logged.
func endOneTurn(t *testing.T, tokens *flakyTokens) string {
	t.Helper()
	var logs bytes.Buffer
	te := NewTurnEnv(tokens, New(nil, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}), 0)
	te.retryFor, te.backoffMin, te.backoffMax = 20*time.Millisecond, time.Millisecond, 2*time.Millisecond
	env, end := te.Begin(user.Principal{UserID: "u1"}, "c9", "claude-x")
	if _, err := env(context.Background()); err != nil {
		t.Fatal(err)
	}
	end()
	te.Finish(context.Background())
	return logs.String()
}

// TestTurnEnvRevokeOfAGoneToken: a turn that outlived its token's record
// (the sweep deleted it) ends without retries or a warning: a token
// without a record is refused as a revoked one is.
func TestTurnEnvRevokeOfAGoneToken(t *testing.T) {
	tokens := &flakyTokens{failures: math.MaxInt, failWith: fault.New(fault.NotFound, "token not found")}
	if logs := endOneTurn(t, tokens); tokens.attempts != 1 || strings.Contains(logs, "level=WARN") {
		t.Fatalf("%d revoke attempts, logs %q; want one attempt and no warning", tokens.attempts, logs)
	}
}

// TestTurnEnvRevokeGivesUp: a revocation that keeps failing is given up
// once its retry time has passed; with nowhere to keep it (Keep), that is
// logged as an error naming the token.
func TestTurnEnvRevokeGivesUp(t *testing.T) {
	tokens := &flakyTokens{failures: math.MaxInt}
	logs := endOneTurn(t, tokens)
	if tokens.attempts < 2 {
		t.Fatalf("%d revoke attempts: not retried", tokens.attempts)
	}
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "tok_1") {
		t.Fatalf("no error logged: %q", logs)
	}
}

// TestTurnEnvFinishRevokesBeforeTheServerStops: a server stopping while
// a turn's revocation waits for its next retry gets it retried at once,
// and Finish returns once the token is revoked, instead of the retry
// ending with the process and the token staying usable until it expires.
func TestTurnEnvFinishRevokesBeforeTheServerStops(t *testing.T) {
	tokens := &flakyTokens{failures: 1}
	te := NewTurnEnv(tokens, New(nil, Config{}), 0)
	// The next retry would come long after the server has stopped.
	te.retryFor, te.backoffMin = 2*time.Hour, time.Hour
	env, end := te.Begin(user.Principal{UserID: "u1"}, "c9", "claude-x")
	if _, err := env(context.Background()); err != nil {
		t.Fatal(err)
	}
	end()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	te.Finish(ctx)
	if tokens.usable("tok_1") {
		t.Fatalf("the token is usable after the server finished its revocations (%d attempts)", tokens.attempts)
	}
}

// endTurnAtShutdown runs a turn that issues its token (tok_1) and ends,
// then finishes te as a server whose shutdown grace is already over.
func endTurnAtShutdown(t *testing.T, te *TurnEnv) {
	t.Helper()
	env, end := te.Begin(user.Principal{UserID: "u1"}, "c9", "claude-x")
	if _, err := env(context.Background()); err != nil {
		t.Fatal(err)
	}
	end()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace is over
	te.Finish(ctx)
}

// TestTurnEnvFinishGivesUpWhenTheGraceEnds: revocations that still fail
// when the shutdown grace ends are given up, with nowhere to keep them
// logged as errors, and Finish returns with none left running.
func TestTurnEnvFinishGivesUpWhenTheGraceEnds(t *testing.T) {
	var logs bytes.Buffer
	tokens := &flakyTokens{failures: math.MaxInt}
	te := NewTurnEnv(tokens, New(nil, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}), 0)
	te.backoffMin = time.Millisecond
	endTurnAtShutdown(t, te)
	te.mu.Lock()
	left := te.retrying
	te.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d revocations still retried after Finish returned", left)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "tok_1") {
		t.Fatalf("no error logged: %q", logs.String())
	}
}

// memKept keeps revocations in memory, as the folder of DATA_DIR does
// across a restart.
type memKept struct {
	mu   sync.Mutex
	toks map[string]time.Time
}

func (k *memKept) Keep(id string, expires time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.toks[id] = expires
	return nil
}

func (k *memKept) Kept() (map[string]time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.toks), nil
}

func (k *memKept) Forget(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.toks, id)
	return nil
}

// TestTurnEnvKeepsRevocationsGivenUpForTheNextStart: a revocation that
// still fails when the shutdown grace ends (the database down all along)
// is kept with the token's expiry, and the next start revokes the token
// and forgets it; a kept token that has expired meanwhile is forgotten
// without a revocation.
func TestTurnEnvKeepsRevocationsGivenUpForTheNextStart(t *testing.T) {
	tokens := &flakyTokens{failures: math.MaxInt}
	kept := &memKept{toks: map[string]time.Time{}}
	te := NewTurnEnv(tokens, New(nil, Config{}), 0)
	te.Keep(kept)
	te.backoffMin = time.Millisecond
	issued := time.Now()
	endTurnAtShutdown(t, te)
	if exp, ok := kept.toks["tok_1"]; !ok || exp.Before(issued.Add(DefaultTokenTTL)) {
		t.Fatalf("kept revocations after the shutdown: %v, want tok_1 expiring no earlier than %v", kept.toks, issued.Add(DefaultTokenTTL))
	}

	// The next start, with the database back.
	tokens.mu.Lock()
	tokens.failures = 0
	tokens.mu.Unlock()
	kept.toks["tok_old"] = time.Now().Add(-time.Minute)
	next := NewTurnEnv(tokens, New(nil, Config{}), 0)
	next.Keep(kept)
	if err := next.RevokeKept(); err != nil {
		t.Fatal(err)
	}
	next.Finish(context.Background())
	if tokens.usable("tok_1") {
		t.Fatal("the token of a turn that ended while the database was down is usable after the next start")
	}
	if !tokens.usable("tok_old") {
		t.Fatal("an expired kept token was revoked")
	}
	if len(kept.toks) != 0 {
		t.Fatalf("kept revocations after the next start: %v", kept.toks)
	}
}

// TestTurnEnvRevokeKeptWhileRunning: a revocation kept while the server
// runs (by its own retries that gave up, or by another server sharing the
// place) is made by the next RevokeKept, and one already being retried is
// left to its retries: calling RevokeKept again while the store still
// fails starts no second attempt for the same token.
func TestTurnEnvRevokeKeptWhileRunning(t *testing.T) {
	tokens := &flakyTokens{failures: math.MaxInt}
	kept := &memKept{toks: map[string]time.Time{}}
	te := NewTurnEnv(tokens, New(nil, Config{}), 0)
	te.Keep(kept)
	// The first retry would come long after the test ends.
	te.retryFor, te.backoffMin = 2*time.Hour, time.Hour
	if err := te.RevokeKept(); err != nil {
		t.Fatal(err)
	}
	if tokens.attempts != 0 {
		t.Fatalf("%d revoke attempts with nothing kept", tokens.attempts)
	}

	if err := kept.Keep("tok_2", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := te.RevokeKept(); err != nil {
		t.Fatal(err)
	}
	if tokens.attempts != 1 {
		t.Fatalf("%d revoke attempts after a revocation was kept, want 1", tokens.attempts)
	}
	for range 3 {
		if err := te.RevokeKept(); err != nil {
			t.Fatal(err)
		}
	}
	te.mu.Lock()
	retrying := te.retrying
	te.mu.Unlock()
	if tokens.attempts != 1 || retrying != 1 {
		t.Fatalf("%d revoke attempts and %d retries after calling RevokeKept again, want 1 and 1", tokens.attempts, retrying)
	}

	// The store is back: the retry under way revokes the token at once
	// as the server stops, and forgets it.
	tokens.mu.Lock()
	tokens.failures = 0
	tokens.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	te.Finish(ctx)
	if tokens.usable("tok_2") {
		t.Fatalf("the kept token is usable (%d revoke attempts)", tokens.attempts)
	}
	if _, ok := kept.toks["tok_2"]; ok {
		t.Fatal("the revoked token is still kept")
	}
}
