package file

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"sales.csv", true},
		{"data/2026/q3.xlsx", true},
		{"outputs/chart.png", true},
		{"a..b/c..", true},
		{"100%.txt", true},
		{"100%25.txt", true},
		{"file name with spaces.txt", true},
		{"ünïcode/ファイル.txt", true},
		{"", false},
		{"/etc/passwd", false},
		{"../x", false},
		{"a/../b", false},
		{"a/..", false},
		{"..", false},
		{"./a", false},
		{"a/./b", false},
		{"a//b", false},
		{"dir/", false},
		{"a\\b", false},
		{"..\\x", false},
		{"a\x00b", false},
		{"a\xffb", false},
		{"\xc0\xae\xc0\xae/x", false},
		{"a%ffb", true}, // the raw key of a URL path; its decoded form is refused
		{"a\nb", false},
		{"%2e%2e/x", false},
		{"%2E%2E/x", false},
		{".%2e/x", false},
		{"%2e./x", false},
		{"a/%2e%2e", false},
		{"a%2Fb", false},
		{"a%2fb", false},
		{"a%5Cb", false},
		{"a%00b", false},
		{"%252e%252e/x", false},
		{"%2Fetc/passwd", false},
		{"a/%2e/b", false},
		{strings.Repeat("abcdefg/", MaxKeyLen/8-1) + "abcdefgh", true},
		{strings.Repeat("abcdefg/", MaxKeyLen/8) + "a", false},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
	}
	for _, tt := range tests {
		err := ValidateKey(tt.key)
		if tt.ok && err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", tt.key, err)
		}
		if !tt.ok && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", tt.key, err)
		}
	}
}

func TestKeyLocationAndPath(t *testing.T) {
	tests := []struct {
		key   string
		mount Mount
		rel   string
		path  string
	}{
		{"sales.csv", Uploads, "sales.csv", "/mnt/user-data/uploads/sales.csv"},
		{"data/2026/q3.xlsx", Uploads, "data/2026/q3.xlsx", "/mnt/user-data/uploads/data/2026/q3.xlsx"},
		{"outputs/chart.png", Outputs, "chart.png", "/mnt/user-data/outputs/chart.png"},
		{"outputs/a/b.txt", Outputs, "a/b.txt", "/mnt/user-data/outputs/a/b.txt"},
		{"outputs", Uploads, "outputs", "/mnt/user-data/uploads/outputs"},
		{"outputsx/a", Uploads, "outputsx/a", "/mnt/user-data/uploads/outputsx/a"},
	}
	for _, tt := range tests {
		m, rel, err := KeyLocation(tt.key)
		if err != nil || m != tt.mount || rel != tt.rel {
			t.Errorf("KeyLocation(%q) = %q, %q, %v; want %q, %q", tt.key, m, rel, err, tt.mount, tt.rel)
		}
		p, err := KeyPath(tt.key)
		if err != nil || p != tt.path {
			t.Errorf("KeyPath(%q) = %q, %v; want %q", tt.key, p, err, tt.path)
		}
		back, ok := KeyOf(m, rel)
		if !ok || back != tt.key {
			t.Errorf("KeyOf(%q, %q) = %q, %v; want %q", m, rel, back, ok, tt.key)
		}
	}
	if _, _, err := KeyLocation("outputs/"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("KeyLocation(outputs/) = %v, want ErrInvalidKey", err)
	}
	if _, ok := KeyOf(Workspace, "a"); ok {
		t.Error("KeyOf(workspace) reported a key")
	}
}
