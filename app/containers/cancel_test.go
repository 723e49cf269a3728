package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/fault"
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

// slowBackend's boots tell booting that they started, then wait until
// release is closed.
type slowBackend struct {
	*fakeBackend
	booting chan struct{}
	release chan struct{}
}

func (b slowBackend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	b.booting <- struct{}{}
	<-b.release
	return b.fakeBackend.Ensure(ctx, spec)
}

// TestStoppedCallersDoNotWaitForABoot: while one caller boots a
// container's sandbox, a request for the same container whose context
// ends (a chat turn stopped by its owner, a Messages API client gone)
// gives up waiting for the container's lock with the end of its context
// and does nothing: a command, a restart, a removal, a resolve. The boot
// goes on, and its sandbox serves the next caller without a second boot.
// Before, each waited for the boot to end (up to a minute for a restore
// started early) and then did its work.
func TestStoppedCallersDoNotWaitForABoot(t *testing.T) {
	b := slowBackend{fakeBackend: newFake("docker"), booting: make(chan struct{}, 1), release: make(chan struct{})}
	s, st, _ := newService(b)
	c, err := s.ForUser(context.Background(), alice, "x")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.Exec(context.Background(), c.ID(), sandbox.Command{Args: []string{"true"}})
		first <- err
	}()
	<-b.booting

	type ended struct {
		op      string
		err     error
		booting bool // the boot was still held when the call returned
	}
	var released atomic.Bool
	ops := map[string]func(ctx context.Context) error{
		"exec": func(ctx context.Context) error {
			_, err := s.Exec(ctx, c.ID(), sandbox.Command{Args: []string{"true"}})
			return err
		},
		"restart": func(ctx context.Context) error { return s.Restart(ctx, c.ID()) },
		"remove":  func(ctx context.Context) error { return s.Remove(ctx, c.ID()) },
		"resolve": func(ctx context.Context) error {
			_, err := s.ForUser(ctx, alice, "x")
			return err
		},
	}
	ctx, stop := context.WithCancel(context.Background())
	ends := make(chan ended, len(ops))
	for op, f := range ops {
		go func() {
			err := f(ctx)
			ends <- ended{op, err, !released.Load()}
		}()
	}
	stop()
	// The boot is held until every stopped caller returned, or long
	// after: a caller that waits for the boot returns only once it is
	// let go, which booting tells.
	var got []ended
	bound := time.After(30 * time.Second)
wait:
	for len(got) < len(ops) {
		select {
		case e := <-ends:
			got = append(got, e)
		case <-bound:
			break wait
		}
	}
	released.Store(true)
	close(b.release)
	for len(got) < len(ops) {
		got = append(got, <-ends)
	}
	for _, e := range got {
		if !e.booting || !errors.Is(e.err, context.Canceled) {
			t.Errorf("%s of a stopped caller: returned during the boot %v, error %v; want it to return during the boot with the end of its context", e.op, e.booting, e.err)
		}
		if errors.Is(e.err, sandbox.ErrUnavailable) || fault.KindOf(e.err) != fault.Internal {
			t.Errorf("%s of a stopped caller: %v reads as a failure of the sandbox", e.op, e.err)
		}
	}

	if err := <-first; err != nil {
		t.Fatalf("the boot's own caller: %v", err)
	}
	if _, err := st.Container(context.Background(), c.ID()); err != nil {
		t.Fatalf("the container after a stopped removal: %v; want it kept", err)
	}
	if _, err := s.Exec(context.Background(), c.ID(), sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatalf("the next caller: %v", err)
	}
	b.mu.Lock()
	n, stopped := b.booted[c.ID()], b.stopped
	b.mu.Unlock()
	if n != 1 || len(stopped) != 0 {
		t.Fatalf("%d boots and stops %v; want the one boot, serving the next caller", n, stopped)
	}
}
