package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// cancelledBackend is a backend whose daemon check fails the way the
// Docker client does when its caller's context ends with a cause: an
// error that wraps the cause, not context.Canceled.
type cancelledBackend struct{ *fakeBackend }

func (b cancelledBackend) Available(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("docker: daemon: error during connect: %w", context.Cause(ctx))
}

// TestBootOfAStoppedCallerIsNoFailure: a caller that goes while its
// sandbox boots (a chat turn stopped by its owner) gets the end of its
// context, and nothing is logged as a failed boot (before, the backend
// counted as unavailable and the server logged "sandbox boot failed" at
// ERROR with the stop as its cause).
func TestBootOfAStoppedCallerIsNoFailure(t *testing.T) {
	var logged bytes.Buffer
	s, _, _ := newService(cancelledBackend{newFake("docker")})
	s.log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := s.ForUser(context.Background(), alice, "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(errors.New("the turn was stopped by its owner")) })
	_, err = s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}})
	if !errors.Is(err, context.Canceled) || errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("exec of a stopped caller: %v; want the end of its context", err)
	}
	if logged.Len() != 0 {
		t.Fatalf("logged for a stopped caller:\n%s", logged.String())
	}
}
