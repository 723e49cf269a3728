package fsroot

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/app/tools"
	"threadbox/domain/file"
)

// Containers serves the text editor's file port.
var _ tools.Files = (*Containers)(nil)

func TestContainersBySandboxPath(t *testing.T) {
	base := t.TempDir()
	dirsOf := func(id string) Dirs {
		root := filepath.Join(base, id)
		return Dirs{
			Workspace: filepath.Join(root, "workspace"),
			Uploads:   filepath.Join(root, "uploads"),
			Outputs:   filepath.Join(root, "outputs"),
			Skills:    filepath.Join(root, "skills"),
		}
	}
	for _, id := range []string{"c1", "c2"} {
		d := dirsOf(id)
		for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := NewContainers(dirsOf, Options{})
	ctx := context.Background()

	if err := c.WriteFile(ctx, "c1", "notes/a.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "c1", "workspace", "notes", "a.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("relative path did not land in the workspace: %q, %v", b, err)
	}
	if b, err := c.ReadFile(ctx, "c1", "/home/agent/workspace/notes/a.txt", 10); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := c.ReadFile(ctx, "c2", "/home/agent/workspace/notes/a.txt", 10); !errors.Is(err, file.ErrNotFound) {
		t.Fatalf("another container sees the file: %v", err)
	}
	// Host writes into uploads are allowed; skills never.
	if _, err := c.Write(ctx, "c1", "/mnt/user-data/uploads/d/x.csv", strings.NewReader("1,2"), 100); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "c1", "/mnt/skills/s/SKILL.md", []byte("x")); !errors.Is(err, file.ErrReadOnly) {
		t.Fatalf("skills write = %v", err)
	}
	if err := c.WriteFile(ctx, "c1", "/etc/passwd", []byte("x")); !errors.Is(err, file.ErrNoMount) {
		t.Fatalf("write outside mounts = %v", err)
	}
	rc, info, err := c.Open(ctx, "c1", "/mnt/user-data/uploads/d/x.csv")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "1,2" || info.Rel != "d/x.csv" {
		t.Fatalf("Open = %q, %+v", b, info)
	}
	walk, err := c.Walk(ctx, "c1", "/mnt/user-data/uploads")
	if err != nil || len(walk) != 1 || walk[0].Rel != "d/x.csv" {
		t.Fatalf("Walk = %+v, %v", walk, err)
	}
	list, err := c.List(ctx, "c1", "/mnt/user-data/uploads")
	if err != nil || len(list) != 1 || list[0].Rel != "d" || !list[0].Dir {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if st, err := c.Stat(ctx, "c1", "/mnt/user-data/uploads/d/x.csv"); err != nil || st.Size != 3 {
		t.Fatalf("Stat = %+v, %v", st, err)
	}
	if n, err := c.RemovePrefix(ctx, "c1", file.Uploads, "d/"); err != nil || n != 1 {
		t.Fatalf("RemovePrefix = %d, %v", n, err)
	}
	if err := c.Remove(ctx, "c1", "notes/a.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "c1", "notes/a.txt"); !errors.Is(err, file.ErrNotFound) {
		t.Fatalf("Stat after Remove = %v", err)
	}
}
