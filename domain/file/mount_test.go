package file

import (
	"errors"
	"testing"
)

func TestResolve(t *testing.T) {
	tests := []struct {
		in     string
		mount  Mount
		rel    string
		access Access
		path   string
	}{
		{"/home/agent/workspace/a.txt", Workspace, "a.txt", ReadWrite, "/home/agent/workspace/a.txt"},
		{"a.txt", Workspace, "a.txt", ReadWrite, "/home/agent/workspace/a.txt"},
		{"sub/../b.txt", Workspace, "b.txt", ReadWrite, "/home/agent/workspace/b.txt"},
		{".", Workspace, ".", ReadWrite, "/home/agent/workspace"},
		{"/home/agent/workspace/", Workspace, ".", ReadWrite, "/home/agent/workspace"},
		{"/mnt/user-data/uploads/sales.csv", Uploads, "sales.csv", ReadOnly, "/mnt/user-data/uploads/sales.csv"},
		{"/mnt/user-data/outputs/x/y.png", Outputs, "x/y.png", ReadWrite, "/mnt/user-data/outputs/x/y.png"},
		{"/mnt/user-data/outputs", Outputs, ".", ReadWrite, "/mnt/user-data/outputs"},
		{"../../../mnt/user-data/outputs/r.png", Outputs, "r.png", ReadWrite, "/mnt/user-data/outputs/r.png"},
		{"/mnt/skills/pdf/SKILL.md", Skills, "pdf/SKILL.md", ReadOnly, "/mnt/skills/pdf/SKILL.md"},
		{"//mnt//user-data/outputs//a", Outputs, "a", ReadWrite, "/mnt/user-data/outputs/a"},
	}
	table := DefaultTable()
	for _, tt := range tests {
		loc, err := table.Resolve(tt.in)
		if err != nil {
			t.Errorf("Resolve(%q) error %v", tt.in, err)
			continue
		}
		want := Location{Mount: tt.mount, Rel: tt.rel, Access: tt.access, Path: tt.path}
		if loc != want {
			t.Errorf("Resolve(%q) = %+v, want %+v", tt.in, loc, want)
		}
		if p, ok := table.Path(loc.Mount, loc.Rel); !ok || p != tt.path {
			t.Errorf("Path(%q, %q) = %q, %v; want %q", loc.Mount, loc.Rel, p, ok, tt.path)
		}
	}
}

func TestResolveRefusals(t *testing.T) {
	tests := []struct {
		in    string
		write bool
		err   error
		msg   string
	}{
		{"/mnt/user-data/outputs-x/a", false, ErrNoMount, "Path '/mnt/user-data/outputs-x/a' does not match any session mount"},
		{"/mnt/user-data/outputsx", true, ErrNoMount, "Path '/mnt/user-data/outputsx' does not match any session mount"},
		{"/mnt/user-data", false, ErrNoMount, "Path '/mnt/user-data' does not match any session mount"},
		{"/etc/passwd", false, ErrNoMount, "Path '/etc/passwd' does not match any session mount"},
		{"../secret", false, ErrNoMount, "Path '../secret' does not match any session mount"},
		{"/home/agent/workspace/../../../etc/shadow", true, ErrNoMount, "Path '/home/agent/workspace/../../../etc/shadow' does not match any session mount"},
		{"/mnt/user-data/outputs/../uploads/a.csv", true, ErrReadOnlyMount, "Path '/mnt/user-data/outputs/../uploads/a.csv' is in a read-only mount"},
		{"/home/agent/workspace2/a", false, ErrNoMount, "Path '/home/agent/workspace2/a' does not match any session mount"},
		{"", false, ErrNoMount, "Path '' does not match any session mount"},
		{"a\x00b", false, ErrNoMount, "Path 'a\x00b' does not match any session mount"},
		{"/mnt/user-data/uploads/a.csv", true, ErrReadOnlyMount, "Path '/mnt/user-data/uploads/a.csv' is in a read-only mount"},
		{"/mnt/user-data/uploads", true, ErrReadOnlyMount, "Path '/mnt/user-data/uploads' is in a read-only mount"},
		{"/mnt/skills/pdf/SKILL.md", true, ErrReadOnlyMount, "Path '/mnt/skills/pdf/SKILL.md' is in a read-only mount"},
		{"/mnt/skillsx", true, ErrNoMount, "Path '/mnt/skillsx' does not match any session mount"},
	}
	table := DefaultTable()
	for _, tt := range tests {
		var err error
		if tt.write {
			_, err = table.ResolveWrite(tt.in)
		} else {
			_, err = table.Resolve(tt.in)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("resolve(%q, write=%v) = %v, want %v", tt.in, tt.write, err, tt.err)
			continue
		}
		var me *MountError
		if !errors.As(err, &me) || me.Path != tt.in {
			t.Errorf("resolve(%q): error %#v does not carry the given path", tt.in, err)
		}
		if err.Error() != tt.msg {
			t.Errorf("resolve(%q) message = %q, want %q", tt.in, err.Error(), tt.msg)
		}
	}
}

func TestResolveWriteAllowsReadWriteMounts(t *testing.T) {
	for _, p := range []string{"notes.md", "/mnt/user-data/outputs/r.png", "/home/agent/workspace/x/y"} {
		if _, err := DefaultTable().ResolveWrite(p); err != nil {
			t.Errorf("ResolveWrite(%q) = %v", p, err)
		}
	}
}
