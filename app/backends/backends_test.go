package backends

import (
	"context"
	"errors"
	"slices"
	"testing"

	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// fakeBackend is a sandbox.Backend whose availability the test sets.
type fakeBackend struct {
	sandbox.Backend // nil: calls other than these panic
	name            string
	err             error
	checkpoint      sandbox.CheckpointSupport
}

func (f fakeBackend) Name() string                        { return f.name }
func (f fakeBackend) Available(ctx context.Context) error { return f.err }
func (f fakeBackend) Isolation() string                   { return "" }
func (f fakeBackend) EnforcedLimits(context.Context) ([]string, string) {
	return nil, ""
}
func (f fakeBackend) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return f.checkpoint
}

// describedBackend also describes itself.
type describedBackend struct {
	fakeBackend
	isolation string
	limits    []string
	mechanism string
}

func (d describedBackend) Isolation() string { return d.isolation }
func (d describedBackend) EnforcedLimits(context.Context) ([]string, string) {
	return d.limits, d.mechanism
}

// warnedBackend is a described backend that must not run untrusted code.
type warnedBackend struct {
	describedBackend
	warning string
}

func (w warnedBackend) Warning() string { return w.warning }

var admin = user.Principal{UserID: "u1", OrgID: "o1", Role: user.Admin}

func TestMatrix(t *testing.T) {
	down := errors.New("docker: daemon: connection refused")
	svc := New([]sandbox.Backend{
		describedBackend{fakeBackend{name: "docker", err: down, checkpoint: sandbox.FilesOnly("files only: no CRIU")}, IsolationNamespaces, nil, ""},
		warnedBackend{describedBackend{fakeBackend{name: "local"}, IsolationProcessJail, []string{"memory", "pids"}, "cgroup v1"}, "development jail"},
		fakeBackend{name: "mystery", checkpoint: sandbox.CheckpointSupport{Supported: true, Mechanism: "gVisor"}},
	})
	got, err := svc.Matrix(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Name: "docker", Primary: true, Available: false, Reason: down.Error(), Isolation: IsolationNamespaces, Limits: []string{}, Checkpoint: sandbox.FilesOnly("files only: no CRIU")},
		{Name: "local", Available: true, Isolation: IsolationProcessJail, Limits: []string{"memory", "pids"}, Mechanism: "cgroup v1", Warning: "development jail"},
		{Name: "mystery", Available: true, Isolation: IsolationUnknown, Limits: []string{}, Checkpoint: sandbox.CheckpointSupport{Supported: true, Mechanism: "gVisor"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Primary != w.Primary || g.Available != w.Available || g.Reason != w.Reason ||
			g.Isolation != w.Isolation || !slices.Equal(g.Limits, w.Limits) || g.Mechanism != w.Mechanism || g.Warning != w.Warning || g.Checkpoint != w.Checkpoint {
			t.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestMatrixAdminsOnly(t *testing.T) {
	svc := New([]sandbox.Backend{fakeBackend{name: "local"}})
	member := admin
	member.Role = user.Member
	_, err := svc.Matrix(context.Background(), member)
	if fault.KindOf(err) != fault.Forbidden {
		t.Errorf("member: %v, want forbidden", err)
	}
}

func TestCheck(t *testing.T) {
	down := errors.New("docker: image threadbox-sandbox:latest: no such image")
	noRoot := errors.New("local: no root filesystem")
	tests := []struct {
		name      string
		backends  []sandbox.Backend
		want      []Status
		wantReady bool
	}{
		{"none configured: code execution is off, nothing to wait for", nil, []Status{}, true},
		{"the only one is up", []sandbox.Backend{fakeBackend{name: "docker"}}, []Status{{Name: "docker", Available: true}}, true},
		{"the only one is down", []sandbox.Backend{fakeBackend{name: "docker", err: down}},
			[]Status{{Name: "docker", Reason: down.Error()}}, false},
		{"every one is down", []sandbox.Backend{fakeBackend{name: "docker", err: down}, fakeBackend{name: "local", err: noRoot}},
			[]Status{{Name: "docker", Reason: down.Error()}, {Name: "local", Reason: noRoot.Error()}}, false},
		{"a fallback is up", []sandbox.Backend{fakeBackend{name: "docker", err: down}, fakeBackend{name: "local"}},
			[]Status{{Name: "docker", Reason: down.Error()}, {Name: "local", Available: true}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ready := New(tt.backends).Check(context.Background())
			if ready != tt.wantReady || !slices.Equal(got, tt.want) {
				t.Errorf("Check = %+v, %v; want %+v, %v", got, ready, tt.want, tt.wantReady)
			}
		})
	}
}
