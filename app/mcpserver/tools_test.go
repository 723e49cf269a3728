package mcpserver

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/files"
)

// TestWithChanged links the outputs a call made or changed, once each, and
// nothing when a listing is missing.
func TestWithChanged(t *testing.T) {
	f := func(p, etag string, size int64) files.File { return files.File{Path: p, ETag: etag, SizeBytes: size} }
	const a, b, c = "/mnt/user-data/outputs/a.txt", "/mnt/user-data/outputs/b.txt", "/mnt/user-data/outputs/c.txt"
	named := link("s", a, 1)
	for _, tt := range []struct {
		name          string
		links         []*mcp.ResourceLink
		before, after map[string]files.File
		want          []string
	}{
		{"new file", nil, map[string]files.File{}, map[string]files.File{a: f(a, "1", 1)}, []string{a}},
		{"unchanged", nil, map[string]files.File{a: f(a, "1", 1)}, map[string]files.File{a: f(a, "1", 1)}, nil},
		{"changed content", nil, map[string]files.File{a: f(a, "1", 1)}, map[string]files.File{a: f(a, "2", 1)}, []string{a}},
		{"changed size", nil, map[string]files.File{a: f(a, "1", 1)}, map[string]files.File{a: f(a, "1", 2)}, []string{a}},
		{"deleted is not linked", nil, map[string]files.File{b: f(b, "1", 1)}, map[string]files.File{}, nil},
		{"named by the result once", []*mcp.ResourceLink{named}, map[string]files.File{}, map[string]files.File{a: f(a, "1", 1), c: f(c, "1", 1)}, []string{a, c}},
		{"no listing before", nil, nil, map[string]files.File{a: f(a, "1", 1)}, nil},
		{"no listing after", nil, map[string]files.File{}, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := withChanged(tt.links, "s", tt.before, tt.after)
			if len(got) != len(tt.want) {
				t.Fatalf("%d links, want %d", len(got), len(tt.want))
			}
			for i, p := range tt.want {
				if got[i].URI != fileURI("s", p) {
					t.Errorf("link %d: %s, want %s", i, got[i].URI, fileURI("s", p))
				}
			}
		})
	}
}
