package boxes

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	answers := func(b *opsBox) Agent { return &opsAgent{box: b, done: make(chan struct{})} }
	loses := func(b *opsBox) Agent { return &lostAgent{opsAgent{box: b, done: make(chan struct{})}} }
	for _, tc := range []struct {
		name string
		// agents are the agents of the sandboxes of Warm's boots, in turn.
		agents  []func(b *opsBox) Agent
		fails   bool // Warm fails
		stopped int  // how many sandboxes were stopped
	}{
		{name: "the warm-up ends", agents: []func(*opsBox) Agent{answers}},
		{name: "a failed warm-up is only logged", agents: []func(*opsBox) Agent{func(b *opsBox) Agent {
			return &opsAgent{box: b, done: make(chan struct{}), res: sandbox.Result{ExitCode: 1}}
		}}},
		{name: "an agent that lost the warm-up", fails: true, stopped: 1, agents: []func(*opsBox) Agent{loses}},
		{name: "a lost warm-up, then the next boot", stopped: 1, agents: []func(*opsBox) Agent{loses, answers}},
		{name: "a lost warm-up with every boot", fails: true, stopped: 2, agents: []func(*opsBox) Agent{loses, loses}},
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
			var boots []func(context.Context, sandbox.Spec) (*opsBox, error)
			for _, agent := range tc.agents {
				boots = append(boots, func(context.Context, sandbox.Spec) (*opsBox, error) {
					b := &opsBox{done: make(chan struct{})}
					b.agent = agent(b)
					return b, nil
				})
			}
			spec := sandbox.Spec{ID: sandbox.WarmPrefix + "a", Mounts: sandbox.FolderTargets()}
			done := make(chan error, 1)
			go func() { done <- pool.Warm(context.Background(), spec, stop, boots...) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Warm still waits on the warm-up after 10 s")
			}
			bx, live := set.Live(spec.ID)
			_, slotErr := os.Stat(pool.Slot(spec.ID).Dir)
			if len(stopped) != tc.stopped || slices.ContainsFunc(stopped, func(id string) bool { return id != spec.ID }) {
				t.Fatalf("stopped %q, want %s %d times", stopped, spec.ID, tc.stopped)
			}
			if !tc.fails {
				if err != nil || !live || slotErr != nil {
					t.Fatalf("Warm: %v, live %v, slot %v", err, live, slotErr)
				}
				if _, lost := bx.Agent().(*lostAgent); lost {
					t.Fatal("the warm sandbox is one whose agent lost its warm-up")
				}
				return
			}
			if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, ErrWarmUpLost) {
				t.Fatalf("Warm: %v, want an error wrapping ErrUnavailable and ErrWarmUpLost", err)
			}
			if live || !os.IsNotExist(slotErr) {
				t.Fatalf("after the lost warm-up: live %v, slot %v", live, slotErr)
			}
			if _, ok := pool.Drop(spec.ID); ok {
				t.Fatal("the pool still holds the slot")
			}
		})
	}
}
