package boxes

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// dirLayout makes a slot's places as plain folders, with no mounts.
type dirLayout struct{}

func (dirLayout) Make(dir string, mounts []sandbox.Mount) error {
	for i := range mounts {
		if err := os.MkdirAll(filepath.Join(dir, strconv.Itoa(i)), 0o755); err != nil {
			return err
		}
	}
	return nil
}
func (dirLayout) Place(dir string, i int, _ sandbox.Mount) string {
	return filepath.Join(dir, strconv.Itoa(i))
}
func (dirLayout) Remove(dir string) error { return os.RemoveAll(dir) }

// lostAgent never reports a command's end: it waits for its context's.
type lostAgent struct{ opsAgent }

func (a *lostAgent) Exec(ctx context.Context, _ sandbox.Command) (sandbox.Result, error) {
	<-ctx.Done()
	return sandbox.Result{}, ctx.Err()
}

func TestWarmUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		agent func(b *opsBox) Agent
		fails bool // Warm fails and the sandbox is stopped
	}{
		{name: "the warm-up ends", agent: func(b *opsBox) Agent { return &opsAgent{box: b, done: make(chan struct{})} }},
		{name: "a failed warm-up is only logged", agent: func(b *opsBox) Agent {
			return &opsAgent{box: b, done: make(chan struct{}), res: sandbox.Result{ExitCode: 1}}
		}},
		{name: "an agent that lost the warm-up", fails: true, agent: func(b *opsBox) Agent {
			return &lostAgent{opsAgent{box: b, done: make(chan struct{})}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := New[*opsBox]("test", slog.New(slog.DiscardHandler))
			pool := NewPoolWith(set, t.TempDir(), dirLayout{})
			pool.warmUpWait = 200 * time.Millisecond
			var stopped []string
			stop := func(ctx context.Context, id string) error {
				stopped = append(stopped, id)
				if b, ok := set.Take(id); ok {
					close(b.done)
				}
				return nil
			}
			boot := func(context.Context, sandbox.Spec) (*opsBox, error) {
				b := &opsBox{done: make(chan struct{})}
				b.agent = tc.agent(b)
				return b, nil
			}
			spec := sandbox.Spec{ID: sandbox.WarmPrefix + "a", Mounts: sandbox.FolderTargets()}
			done := make(chan error, 1)
			go func() { done <- pool.Warm(context.Background(), spec, boot, stop) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Warm still waits on the warm-up after 10 s")
			}
			_, live := set.Live(spec.ID)
			_, slotErr := os.Stat(pool.Slot(spec.ID).Dir)
			if !tc.fails {
				if err != nil || !live || slotErr != nil || len(stopped) != 0 {
					t.Fatalf("Warm: %v, live %v, slot %v, stopped %q", err, live, slotErr, stopped)
				}
				return
			}
			if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, ErrWarmUpLost) {
				t.Fatalf("Warm: %v, want an error wrapping ErrUnavailable and ErrWarmUpLost", err)
			}
			if live || len(stopped) != 1 || stopped[0] != spec.ID || !os.IsNotExist(slotErr) {
				t.Fatalf("after the lost warm-up: live %v, stopped %q, slot %v", live, stopped, slotErr)
			}
			if _, ok := pool.Drop(spec.ID); ok {
				t.Fatal("the pool still holds the slot")
			}
		})
	}
}
