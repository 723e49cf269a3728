package fault

import "testing"

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
