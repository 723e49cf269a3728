package containers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// TestBootFailureHidesTheCause: a backend's error (which names host paths)
// reaches the caller as a stable message with an error id; errors.Is still
// finds sandbox.ErrUnavailable.
func TestBootFailureHidesTheCause(t *testing.T) {
	ctx := context.Background()
	cause := errors.New("docker: mount /srv/data/containers/usr_alice--x/workspace: not a directory")
	s, _, _ := newService(&fakeBackend{name: "docker", ensureErr: cause, booted: map[string]int{}})
	c, err := s.ForUser(ctx, alice, "x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}})
	msg := fault.MessageOf(err)
	if !errors.Is(err, sandbox.ErrUnavailable) || !fault.Is(err, fault.Unavailable) || strings.Contains(msg, "/srv") || !strings.Contains(msg, "error id err_") {
		t.Fatalf("boot failure: %v (shown: %q)", err, msg)
	}
}

// TestSandboxTokenConfinement: a sandbox token reaches only the container
// it was issued for, by every way a request names one.
func TestSandboxTokenConfinement(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(newFake("docker"))
	own, _ := s.ForUser(ctx, alice, "own")
	other, _ := s.ForUser(ctx, alice, "other")
	tok := user.Principal{UserID: alice.UserID, OrgID: alice.OrgID, Kind: user.SandboxToken, ContainerID: own.ID()}
	cases := []struct {
		name string
		call func() error
		ok   bool
	}{
		{"ForUser own", func() error { _, err := s.ForUser(ctx, tok, "own"); return err }, true},
		{"ForUser other", func() error { _, err := s.ForUser(ctx, tok, "other"); return err }, false},
		{"ForUser default", func() error { _, err := s.ForUser(ctx, tok, ""); return err }, false},
		{"ForThread", func() error { _, err := s.ForThread(ctx, tok, "thr_1"); return err }, false},
		{"Lookup own", func() error { _, err := s.Lookup(ctx, tok, own.ID()); return err }, true},
		{"Lookup other", func() error { _, err := s.Lookup(ctx, tok, other.ID()); return err }, false},
		{"Peek other", func() error { _, _, err := s.Peek(ctx, tok, "other"); return err }, false},
		{"Scope other", func() error { _, err := s.Scope(ctx, tok, "other", true); return err }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.ok && err != nil || !tc.ok && !fault.Is(err, fault.Forbidden) {
				t.Fatalf("err %v, want ok=%v or forbidden", err, tc.ok)
			}
		})
	}
}
