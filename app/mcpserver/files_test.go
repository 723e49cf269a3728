package mcpserver

import (
	"testing"

	"threadbox/domain/fault"
)

// TestFileURI: a container file's resource URI names its container and its
// path, escaped where a URI needs it, and reads back to both; URIs of
// another form are not found.
func TestFileURI(t *testing.T) {
	for _, tt := range []struct {
		scope, path, uri, wantScope string
	}{
		{"", "/mnt/user-data/outputs/report.csv", "sandbox:///default/mnt/user-data/outputs/report.csv", "default"},
		{"thr_abc", "/home/agent/workspace/a b/c#d.txt", "sandbox:///thr_abc/home/agent/workspace/a%20b/c%23d.txt", "thr_abc"},
		{"my box", "/mnt/user-data/uploads/x?.md", "sandbox:///my%20box/mnt/user-data/uploads/x%3F.md", "my box"},
	} {
		if got := fileURI(tt.scope, tt.path); got != tt.uri {
			t.Errorf("fileURI(%q, %q) = %q, want %q", tt.scope, tt.path, got, tt.uri)
		}
		scope, p, err := parseURI(tt.uri)
		if err != nil || scope != tt.wantScope || p != tt.path {
			t.Errorf("parseURI(%q) = %q, %q, %v", tt.uri, scope, p, err)
		}
	}
	for _, bad := range []string{"", "file:///etc/passwd", "sandbox:///default", "sandbox:///%zz/a", "sandbox:///default/%zz"} {
		if _, _, err := parseURI(bad); !fault.Is(err, fault.NotFound) {
			t.Errorf("parseURI(%q): %v, want not found", bad, err)
		}
	}
}

// TestKeyOf: write_file stores under uploads and outputs only, by absolute
// path or by the Files API's key.
func TestKeyOf(t *testing.T) {
	for _, tt := range []struct {
		path, key string
		ok        bool
	}{
		{"/mnt/user-data/outputs/r.csv", "outputs/r.csv", true},
		{"/mnt/user-data/uploads/data/in.txt", "data/in.txt", true},
		{"outputs/r.csv", "outputs/r.csv", true},
		{"/mnt/user-data/outputs", "", false},
		{"/home/agent/workspace/a.txt", "", false},
		{"/mnt/skills/s/SKILL.md", "", false},
		{"/etc/passwd", "", false},
	} {
		key, err := keyOf(tt.path)
		if (err == nil) != tt.ok || key != tt.key {
			t.Errorf("keyOf(%q) = %q, %v", tt.path, key, err)
		}
		if err != nil && !fault.Is(err, fault.Invalid) {
			t.Errorf("keyOf(%q): %v is not invalid input", tt.path, err)
		}
	}
}
