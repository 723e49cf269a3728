package turns

import (
	"context"
	"slices"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// recordingContainers resolves containers in memory and records what it
// was asked to make.
type recordingContainers struct {
	made []string // "user:<client id>" and "scope:<scope id>" calls that may create
}

func (r *recordingContainers) ForUser(_ context.Context, p user.Principal, clientID string) (container.Container, error) {
	if clientID == "" {
		clientID = container.DefaultClientID
	}
	r.made = append(r.made, "user:"+clientID)
	return container.NewForUser(p.OrgID, p.UserID, clientID, time.Now())
}

func (r *recordingContainers) Scope(_ context.Context, p user.Principal, scopeID string, create bool) (container.Container, error) {
	r.made = append(r.made, "scope:"+scopeID)
	if th, ok := container.ParseRef(scopeID).Thread(); ok {
		if th != "thr_mine" {
			return container.Container{}, fault.New(fault.NotFound, "container not found")
		}
		return container.NewForThread(p.OrgID, p.UserID, th, time.Now())
	}
	return container.NewForUser(p.OrgID, p.UserID, scopeID, time.Now())
}

func (r *recordingContainers) Peek(context.Context, user.Principal, string) (container.Container, bool, error) {
	return container.Container{}, false, nil
}

func (r *recordingContainers) Touch(_ context.Context, c container.Container) (container.Container, error) {
	return c.Touch(time.Now()), nil
}
func (r *recordingContainers) MarkSkills(_ context.Context, c container.Container, may bool) (container.Container, error) {
	return c.WithSkills(may), nil
}

func (r *recordingContainers) ExpiresAt(container.Container) time.Time { return time.Time{} }

// refusingQuota refuses every run.
type refusingQuota struct{ refuse bool }

func (q refusingQuota) BeforeRun(context.Context, string, string, string) error {
	if q.refuse {
		return fault.New(fault.RateLimited, "running_sandboxes_per_user quota reached")
	}
	return nil
}

func (q refusingQuota) BeforeStore(context.Context, string, int64) error { return nil }

// countingEnv records the sandbox variables it issued and revoked.
type countingEnv struct{ begun, ended []string }

func (e *countingEnv) Begin(_ user.Principal, containerID, _ string) (func(context.Context) ([]string, error), func()) {
	e.begun = append(e.begun, containerID)
	return func(context.Context) ([]string, error) { return []string{"ANTHROPIC_AUTH_TOKEN=t"}, nil },
		func() { e.ended = append(e.ended, containerID) }
}

// TestOpenSandbox: a direct tool call's container is resolved by the rule
// of a Messages API request naming it — the caller's default container, a
// named one, or a thread the caller may use — after the quotas, which
// refuse before anything is made; its sandbox variables are issued for it
// and revoked by Close.
func TestOpenSandbox(t *testing.T) {
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Kind: user.APIToken}
	tests := []struct {
		name      string
		scope     string
		refuse    bool
		wantKind  fault.Kind // "" when it opens
		wantScope string
		wantMade  []string
	}{
		{name: "default container", scope: "", wantScope: container.DefaultClientID, wantMade: []string{"user:", "scope:default"}},
		{name: "named container", scope: "work", wantScope: "work", wantMade: []string{"user:work", "scope:work"}},
		{name: "own thread", scope: "thr_mine", wantScope: "thr_mine", wantMade: []string{"scope:thr_mine"}},
		{name: "another user's thread", scope: "thr_theirs", wantKind: fault.NotFound, wantMade: []string{"scope:thr_theirs"}},
		{name: "quota reached", scope: "", refuse: true, wantKind: fault.RateLimited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := &recordingContainers{}
			env := &countingEnv{}
			s := New(Deps{Containers: cs, Quota: refusingQuota{tt.refuse}, SandboxEnv: env})
			sb, err := s.OpenSandbox(context.Background(), p, tt.scope)
			// ForUser is asked with "" for the default container.
			made := slices.Clone(cs.made)
			for i, m := range made {
				if m == "user:"+container.DefaultClientID {
					made[i] = "user:"
				}
			}
			if !slices.Equal(made, tt.wantMade) {
				t.Errorf("made %v, want %v", made, tt.wantMade)
			}
			if tt.wantKind != "" {
				if !fault.Is(err, tt.wantKind) || sb != nil || len(env.begun) != 0 {
					t.Fatalf("err %v, sandbox %v, variables issued for %v", err, sb, env.begun)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sb.ScopeID != tt.wantScope || sb.ContainerID == "" {
				t.Fatalf("sandbox %+v, want scope %q", sb, tt.wantScope)
			}
			vars, err := sb.Env(context.Background())
			if err != nil || len(vars) != 1 {
				t.Fatalf("variables %v %v", vars, err)
			}
			sb.Close()
			if !slices.Equal(env.begun, []string{sb.ContainerID}) || !slices.Equal(env.ended, env.begun) {
				t.Fatalf("variables issued for %v, revoked for %v", env.begun, env.ended)
			}
		})
	}
}
