package sandbox

import (
	"context"
	"errors"
	"testing"
)

func TestNotStarted(t *testing.T) {
	cause := errors.New("no image")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"a cause", cause},
		{"a wrapped sentinel", errors.Join(ErrUnavailable, cause)},
		{"a cancelled request", context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NotStarted(tc.err)
			if !errors.Is(got, ErrNotStarted) || !errors.Is(got, tc.err) || got.Error() != tc.err.Error() {
				t.Fatalf("NotStarted(%v) = %v", tc.err, got)
			}
			if errors.Is(tc.err, ErrNotStarted) {
				t.Fatal("the cause itself was marked")
			}
			if again := NotStarted(got); again != got {
				t.Fatalf("marked twice: %v", again)
			}
		})
	}
	if NotStarted(nil) != nil {
		t.Fatal("nil was marked")
	}
}
