package fsroot

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/tools"
)

// runTool executes one sub-tool call in container c1.
func runTool(t *testing.T, e *tools.Executor, name, input string) *wire.ToolResult {
	t.Helper()
	r, err := e.Execute(context.Background(), messages.ToolCall{ID: "srvtoolu_1", Name: name, Input: json.RawMessage(input), ContainerID: "c1"})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return r
}

// TestEditorOnRealFiles runs app/tools' text editor over Containers on a
// temp folder (moved here from app/tools: app tests never import infra).
func TestEditorOnRealFiles(t *testing.T) {
	root := t.TempDir()
	dirs := Dirs{}
	for _, d := range []struct {
		dst  *string
		name string
	}{{&dirs.Workspace, "workspace"}, {&dirs.Uploads, "uploads"}, {&dirs.Outputs, "outputs"}, {&dirs.Skills, "skills"}} {
		*d.dst = filepath.Join(root, d.name)
		if err := os.MkdirAll(*d.dst, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dirs.Uploads, "in.csv"), []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dirs.Workspace, "link")); err != nil {
		t.Fatal(err)
	}
	fs := NewContainers(func(string) Dirs { return dirs }, Options{})
	e := tools.New(nil, fs, tools.Config{})

	steps := []struct {
		input string
		check func(r *wire.ToolResult) bool
	}{
		{`{"command":"create","path":"src/app.py","file_text":"x = 1\ny = 2\n"}`, func(r *wire.ToolResult) bool {
			return r.Type == wire.ResultEditorCreate && !r.IsFileUpdate
		}},
		{`{"command":"create","path":"src/app.py","file_text":"x = 1\ny = 2\n"}`, func(r *wire.ToolResult) bool { return r.IsFileUpdate }},
		{`{"command":"str_replace","path":"src/app.py","old_str":"y = 2","new_str":"y = 3"}`, func(r *wire.ToolResult) bool {
			return r.OldStart == 2 && len(r.Lines) == 2 && r.Lines[1] == "+y = 3"
		}},
		{`{"command":"insert","path":"/home/agent/workspace/src/app.py","insert_line":0,"insert_text":"import os"}`, func(r *wire.ToolResult) bool {
			return r.NewStart == 1 && r.NewLines == 1
		}},
		{`{"command":"view","path":"src/app.py","view_range":[2,-1]}`, func(r *wire.ToolResult) bool {
			return r.FileContent == "x = 1\ny = 3" && r.TotalLines == 3 && r.StartLine == 2
		}},
		{`{"command":"view","path":"/home/agent/workspace"}`, func(r *wire.ToolResult) bool {
			return r.Type == wire.ResultEditorView && r.FileContent == "src/"
		}},
		{`{"command":"view","path":"/mnt/user-data/uploads/in.csv"}`, func(r *wire.ToolResult) bool { return r.FileContent == "a,b\n1,2" }},
		{`{"command":"create","path":"/mnt/user-data/uploads/in.csv","file_text":""}`, func(r *wire.ToolResult) bool {
			return r.Detail != nil && r.Detail.Explanation == "Path '/mnt/user-data/uploads/in.csv' is in a read-only mount"
		}},
		{`{"command":"view","path":"nope.txt"}`, func(r *wire.ToolResult) bool {
			return r.ErrorCode == wire.CodeFileNotFound && r.Detail.Explanation == "File not found: /home/agent/workspace/nope.txt"
		}},
		{`{"command":"view","path":"link"}`, func(r *wire.ToolResult) bool { return r.IsError() }},
		{`{"command":"create","path":"/mnt/user-data/outputs/r.txt","file_text":"done"}`, func(r *wire.ToolResult) bool { return r.Type == wire.ResultEditorCreate }},
	}
	for _, s := range steps {
		r := runTool(t, e, wire.SubToolTextEditor, s.input)
		if !s.check(r) {
			t.Fatalf("%s: got %+v (detail %+v)", s.input, r, r.Detail)
		}
	}
	got, err := os.ReadFile(filepath.Join(dirs.Workspace, "src", "app.py"))
	if err != nil || string(got) != "import os\nx = 1\ny = 3\n" {
		t.Fatalf("app.py = %q, %v", got, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dirs.Outputs, "r.txt")); string(got) != "done" {
		t.Fatalf("r.txt = %q", got)
	}
}
