package boxes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"threadbox/domain/sandbox"
)

// fakeBox is a box whose agent connection gives up when hang is closed.
type fakeBox struct {
	opsBox
	n      int
	hang   chan struct{}
	killed chan struct{}
}

func newFakeBox(n int) *fakeBox {
	b := &fakeBox{n: n, hang: make(chan struct{}), killed: make(chan struct{}, 1)}
	b.opsBox = opsBox{done: make(chan struct{})}
	b.a = &opsAgent{box: &b.opsBox, done: b.hang}
	return b
}

func (b *fakeBox) Kill() { b.killed <- struct{}{} }

func TestEnsureBootsOnceAndAgainAfterAnEnd(t *testing.T) {
	ctx := context.Background()
	s := New[*fakeBox]("test", slog.New(slog.DiscardHandler))
	var boots atomic.Int32
	boot := func(_ context.Context, spec sandbox.Spec) (*fakeBox, error) {
		return newFakeBox(int(boots.Add(1))), nil
	}
	// Concurrent Ensures of one id boot one box.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Ensure(ctx, sandbox.Spec{ID: "a"}, nil, boot); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, ok := s.Live("a")
	if boots.Load() != 1 || !ok || b.n != 1 {
		t.Fatalf("boots %d, live %v %+v", boots.Load(), ok, b)
	}
	// A box whose agent gave up is dropped and killed; the next Ensure
	// boots anew.
	close(b.hang)
	if _, ok := s.Live("a"); ok {
		t.Fatal("a box whose agent gave up is still live")
	}
	<-b.killed
	if !s.Known("a") {
		t.Error("a box that ended is no longer known")
	}
	if err := s.Ensure(ctx, sandbox.Spec{ID: "a"}, nil, boot); err != nil {
		t.Fatal(err)
	}
	// A box whose sandbox went is dropped.
	b = s.Get("a")
	close(b.done)
	if _, ok := s.Live("a"); ok || s.Get("a") != nil {
		t.Fatal("a box whose sandbox went is still live")
	}
	if !s.Known("a") {
		t.Error("a box that ended is no longer known")
	}
	if err := s.Ensure(ctx, sandbox.Spec{ID: "a"}, nil, boot); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Live("a"); b == nil || b.n != 3 {
		t.Fatalf("after an end: %+v", b)
	}
}

func TestEnsureFailureAndBookkeeping(t *testing.T) {
	ctx := context.Background()
	s := New[*fakeBox]("test", slog.New(slog.DiscardHandler))
	boom := errors.New("boom")
	err := s.Ensure(ctx, sandbox.Spec{ID: "x"}, nil, func(context.Context, sandbox.Spec) (*fakeBox, error) { return nil, boom })
	if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, boom) {
		t.Fatalf("failed boot: %v", err)
	}
	if _, ok := s.Live("x"); ok || s.Known("x") {
		t.Fatal("a failed boot was kept")
	}
	if err := s.Ensure(ctx, sandbox.Spec{}, nil, nil); err == nil || errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("empty id: %v", err)
	}
	s.Put("a", newFakeBox(1))
	s.Put("b", newFakeBox(2))
	ids := s.IDs(nil)
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("IDs = %v", ids)
	}
	if ids := s.IDs(func(b *fakeBox) bool { return b.n == 2 }); !slices.Equal(ids, []string{"b"}) {
		t.Errorf("IDs(n==2) = %v", ids)
	}
	if b, ok := s.Take("a"); !ok || b.n != 1 {
		t.Errorf("Take = %+v %v", b, ok)
	}
	if _, ok := s.Live("a"); ok || !s.Known("a") {
		t.Error("a taken box is live, or forgotten")
	}
	s.Forget("a")
	if s.Known("a") {
		t.Error("Forget kept a")
	}
	if all := s.TakeAll(); len(all) != 1 || all[0].n != 2 || len(s.IDs(nil)) != 0 {
		t.Errorf("TakeAll = %v, left %v", all, s.IDs(nil))
	}
}

// TestStopLogNamesTheBackendOnce checks that a stop's line carries the
// "backend" key the server's logger gives it, once: JSON log readers drop
// or refuse a line with a key twice.
func TestStopLogNamesTheBackendOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)).With("backend", "test")
	s := New[*fakeBox]("test", log)
	boot := func(context.Context, sandbox.Spec) (*fakeBox, error) { return newFakeBox(1), nil }
	ctx := context.Background()
	if err := s.Ensure(ctx, sandbox.Spec{ID: "a"}, nil, boot); err != nil {
		t.Fatal(err)
	}
	b := s.Get("a")
	go func() { <-b.killed; close(b.done) }()
	if err := s.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	line := bytes.TrimSpace(buf.Bytes())
	if !bytes.Contains(line, []byte(`"sandbox stopped"`)) {
		t.Fatalf("no stop line: %s", line)
	}
	if n := jsonKeyCount(t, line, "backend"); n != 1 {
		t.Errorf("the stop line names the backend %d times: %s", n, line)
	}
}

// jsonKeyCount counts the top-level keys named key in the JSON object line.
func jsonKeyCount(t *testing.T, line []byte, key string) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		if k == key {
			n++
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return n
}
