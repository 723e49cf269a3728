package fault

import (
	"errors"
	"fmt"
	"testing"
)

func TestText(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"trimmed", "  Sales  ", "Sales", true},
		{"empty", "   ", "", false},
		{"at the limit", "abcde", "abcde", true},
		{"over the limit", "abcdef", "", false},
		{"unicode", "Café", "Café", true},
		{"NUL", "a\x00b", "", false},
		{"not UTF-8", "caf\xe9", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Text("name", tt.in, 5)
			if tt.ok != (err == nil) || got != tt.want {
				t.Fatalf("Text(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
			if err != nil && KindOf(err) != Invalid {
				t.Fatalf("Text(%q): kind %v, want Invalid", tt.in, KindOf(err))
			}
		})
	}
}

func TestFirstLine(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"one line", errors.New("the sandbox did not stop"), "the sandbox did not stop"},
		{"with output after it", errors.New("runsc restore: exit status 1\nW1207 log line\nmore"), "runsc restore: exit status 1"},
		{"wrapped", fmt.Errorf("workspace: running state: %w", errors.New("stop: timeout\ndetail")), "workspace: running state: stop: timeout"},
		{"empty first line", errors.New("\nsecond"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FirstLine(tt.err); got != tt.want {
				t.Fatalf("FirstLine = %q, want %q", got, tt.want)
			}
		})
	}
}
