package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/containers"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
)

// memStore is an in-memory container.Repository.
type memStore struct {
	mu sync.Mutex
	m  map[string]container.Container
}

func (s *memStore) CreateContainer(_ context.Context, c container.Container) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[c.ID()] = c
	return nil
}

func (s *memStore) Container(_ context.Context, id string) (container.Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	if !ok {
		return container.Container{}, fault.New(fault.NotFound, "container not found")
	}
	return c, nil
}

func (s *memStore) UpdateContainer(ctx context.Context, c container.Container) error {
	return s.CreateContainer(ctx, c)
}

func (s *memStore) MarkSkills(ctx context.Context, id string, may bool) error {
	c, err := s.Container(ctx, id)
	if err != nil {
		return err
	}
	return s.CreateContainer(ctx, c.WithSkills(may))
}

func (s *memStore) DeleteContainer(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

func (s *memStore) ExpireContainer(ctx context.Context, t container.Tombstone) error {
	return s.DeleteContainer(ctx, t.ID)
}

func (s *memStore) Tombstone(context.Context, string) (container.Tombstone, error) {
	return container.Tombstone{}, fault.New(fault.NotFound, "container tombstone not found")
}

func (s *memStore) ContainersCreatedBefore(context.Context, time.Time) ([]container.Container, error) {
	return nil, nil
}

func (s *memStore) ContainersInState(context.Context, container.State) ([]container.Container, error) {
	return nil, nil
}

// layoutFolders serves app/containers' Folders port from hostdirs.
type layoutFolders struct{ l *hostdirs.Layout }

func (f layoutFolders) Prepare(ctx context.Context, id string) ([]sandbox.Mount, error) {
	d, err := f.l.Prepare(ctx, id)
	if err != nil {
		return nil, err
	}
	return d.Mounts(), nil
}

func (f layoutFolders) Remove(ctx context.Context, id string) error { return f.l.Remove(ctx, id) }

func (f layoutFolders) Release(ctx context.Context, idle time.Duration, busy func(string) bool) ([]string, error) {
	return f.l.ReleaseUnused(ctx, idle, busy)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDockerDownServesFromLocal: with
// SANDBOX_BACKEND=docker,local and no Docker daemon, commands are served by
// the local backend and the log says why docker was passed over.
func TestDockerDownServesFromLocal(t *testing.T) {
	rootfs, bin := prerequisites(t)
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/threadbox-test/docker.sock")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	dk, err := docker.New(docker.Config{AgentBin: bin, Settings: boxes.Settings{Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	defer dk.Close()
	lc, err := New(Config{Settings: boxes.Settings{Logger: log, Instance: fmt.Sprintf("fallback%d", time.Now().UnixNano())}, RootFS: rootfs, AgentBin: bin})
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { lc.Close() })

	data, err := os.MkdirTemp("", "threadbox-fallback-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(data)
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	st := &memStore{m: map[string]container.Container{}}
	mgr := containers.New(containers.Deps{Store: st, Backends: []sandbox.Backend{dk, lc},
		Folders: layoutFolders{hostdirs.New(data, hostdirs.Options{})}, Log: log})
	rec, _ := container.NewForThread("org_1", "usr_1", "fallback", time.Now())
	st.CreateContainer(context.Background(), rec)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := mgr.Exec(ctx, "fallback", sandbox.Command{Args: []string{"bash", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; echo; id -u"}})
	if err != nil {
		t.Fatalf("exec: %v\nlog:\n%s", err, logs.String())
	}
	defer mgr.Stop(context.Background(), "fallback")
	if !strings.Contains(string(res.Stdout), "1000") {
		t.Errorf("stdout %q", res.Stdout)
	}
	if rec, _ := st.Container(ctx, "fallback"); rec.Backend() != "local" {
		t.Errorf("served by %q, want local", rec.Backend())
	}
	if st, _ := lc.Status(ctx, "fallback"); st.State != sandbox.StateRunning {
		t.Errorf("local status %q, want running", st.State)
	}
	text := logs.String()
	for _, want := range []string{"sandbox backend unavailable, trying the next", "backend=docker", "next=local", "docker: daemon"} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %q:\n%s", want, text)
		}
	}
}
