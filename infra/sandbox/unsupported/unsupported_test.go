package unsupported

import (
	"context"
	"errors"
	"strings"
	"testing"

	"threadbox/domain/sandbox"
)

func TestErrorsNameBackendAndNeeds(t *testing.T) {
	tests := []struct{ name, need string }{
		{"e2b", "E2B account"},
		{"superserve", "Superserve account"},
		{"blaxel", "Blaxel account"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if b.Name() != tt.name {
				t.Errorf("name %q", b.Name())
			}
			for what, err := range map[string]error{
				"available": b.Available(ctx),
				"ensure":    b.Ensure(ctx, sandbox.Spec{ID: "x"}),
			} {
				if err == nil || !strings.HasPrefix(err.Error(), tt.name+": ") && !strings.Contains(err.Error(), ": "+tt.name+": ") ||
					!strings.Contains(err.Error(), tt.need) || !strings.Contains(err.Error(), tt.name+": not available: needs the provider's service") ||
					!errors.Is(err, ErrUnsupported) {
					t.Errorf("%s: %v, want an error naming %s and %q", what, err, tt.name, tt.need)
				}
			}
			if err := b.Ensure(ctx, sandbox.Spec{ID: "x"}); !errors.Is(err, sandbox.ErrUnavailable) {
				t.Errorf("ensure: %v, want sandbox.ErrUnavailable", err)
			}
			if _, err := b.Exec(ctx, "x", sandbox.Command{}); !errors.Is(err, sandbox.ErrUnavailable) {
				t.Errorf("exec: %v", err)
			}
		})
	}
	for _, name := range []string{"docker", "firecracker", "microvm"} {
		if _, err := New(name); err == nil {
			t.Errorf("New(%s) succeeded: it is not a provider's service", name)
		}
	}
}

func TestBroken(t *testing.T) {
	cause := errors.New("docker: client: unable to parse docker host `nonsense`")
	b := Broken("docker", cause)
	ctx := context.Background()
	if b.Name() != "docker" || b.Isolation() != "unknown" {
		t.Errorf("name %q isolation %q", b.Name(), b.Isolation())
	}
	if err := b.Available(ctx); !errors.Is(err, cause) {
		t.Errorf("available: %v, want %v", err, cause)
	}
	if err := b.Ensure(ctx, sandbox.Spec{ID: "x"}); !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, cause) {
		t.Errorf("ensure: %v, want sandbox.ErrUnavailable and the cause", err)
	}
}
