package tools

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"threadbox/app/containers"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// The container manager serves the Sandbox port (infra/fsroot's tests
// check that it serves the Files port: app tests never import infra).
var _ Sandbox = (*containers.Service)(nil)

// lifeless serves the Sandbox port's questions about a sandbox's life as
// an owner that never stops a sandbox idle: one life, no notes.
type lifeless struct{}

func (lifeless) Idle() time.Duration    { return 0 }
func (lifeless) Life(string) uint64     { return 1 }
func (lifeless) TakeNote(string) string { return "" }

// fakeSandbox records commands and answers with a scripted result; its
// backend keeps no sessions.
type fakeSandbox struct {
	lifeless
	mu       sync.Mutex
	cmds     []sandbox.Command
	restarts int
	result   sandbox.Result
	err      error
	block    bool // wait for ctx to end instead of answering
}

func (f *fakeSandbox) Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error) {
	f.mu.Lock()
	f.cmds = append(f.cmds, cmd)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return sandbox.Result{}, fmt.Errorf("fake exec: %w", ctx.Err())
	}
	return f.result, f.err
}

func (f *fakeSandbox) Start(context.Context, string, sandbox.Command, *sandbox.TTY) (sandbox.Session, error) {
	return nil, fmt.Errorf("fake start: %w", sandbox.ErrUnsupported)
}

func (f *fakeSandbox) Restart(ctx context.Context, containerID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts++
	return nil
}

// fakeFiles is an in-memory file tree; folders exist implicitly above files
// and explicitly in dirs.
type fakeFiles struct {
	mu    sync.Mutex
	files map[string]string
	dirs  map[string]bool
	block bool
}

func newFakeFiles() *fakeFiles {
	return &fakeFiles{files: map[string]string{}, dirs: map[string]bool{
		sandbox.WorkspaceDir: true, sandbox.UploadsDir: true, sandbox.OutputsDir: true, sandbox.SkillsDir: true,
	}}
}

func (f *fakeFiles) wait(ctx context.Context) error {
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *fakeFiles) isDir(p string) bool {
	if f.dirs[p] {
		return true
	}
	for k := range f.files {
		if strings.HasPrefix(k, p+"/") {
			return true
		}
	}
	return false
}

func (f *fakeFiles) ReadFile(ctx context.Context, containerID, p string, limit int64) ([]byte, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.files[p]
	if !ok {
		return nil, fmt.Errorf("fake read %s: %w", p, file.ErrNotFound)
	}
	if int64(len(s)) > limit {
		s = s[:limit]
	}
	return []byte(s), nil
}

func (f *fakeFiles) WriteFile(ctx context.Context, containerID, p string, data []byte) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[p] = string(data)
	return nil
}

func (f *fakeFiles) Stat(ctx context.Context, containerID, p string) (file.Info, error) {
	if err := f.wait(ctx); err != nil {
		return file.Info{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.files[p]; ok {
		return file.Info{Rel: path.Base(p), Size: int64(len(s))}, nil
	}
	if f.isDir(p) {
		return file.Info{Rel: path.Base(p), Dir: true}, nil
	}
	return file.Info{}, fmt.Errorf("fake stat %s: %w", p, file.ErrNotFound)
}

func (f *fakeFiles) List(ctx context.Context, containerID, p string) ([]file.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	var out []file.Info
	add := func(name string, dir bool) {
		if !seen[name] {
			seen[name] = true
			out = append(out, file.Info{Rel: "sub/" + name, Dir: dir})
		}
	}
	for k := range f.files {
		if rest, ok := strings.CutPrefix(k, p+"/"); ok {
			name, _, nested := strings.Cut(rest, "/")
			add(name, nested)
		}
	}
	for k := range f.dirs {
		if rest, ok := strings.CutPrefix(k, p+"/"); ok && !strings.Contains(rest, "/") {
			add(rest, true)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rel < out[j].Rel })
	return out, nil
}
