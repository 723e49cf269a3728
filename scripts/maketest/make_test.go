package maketest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the checkout this package sits in.
const repoRoot = "../.."

// write creates files (slash-separated paths relative to dir) with their contents.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// copyFile copies the checkout's file name into dir, keeping its mode.
func copyFile(t *testing.T, dir, name string) {
	t.Helper()
	src := filepath.Join(repoRoot, filepath.FromSlash(name))
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, fi.Mode()); err != nil {
		t.Fatal(err)
	}
}

// goDirective is the go line of the checkout's go.mod, so that the small
// module needs no other toolchain.
func goDirective(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "go ") {
			return l
		}
	}
	t.Fatal("go.mod has no go line")
	return ""
}

// module lays out a minimal threadbox module in a fresh git folder, with
// the checkout's Makefile and scripts/lint.sh and a stand-in Docker SDK
// (a local module replacing github.com/docker/docker), plus extra files.
func module(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                              "module threadbox\n\n" + goDirective(t) + "\n\nrequire github.com/docker/docker v0.0.0\n\nreplace github.com/docker/docker => ./third_party/docker\n",
		"third_party/docker/go.mod":           "module github.com/docker/docker\n\n" + goDirective(t) + "\n",
		"third_party/docker/client/client.go": "// Package client stands in for the Docker SDK.\npackage client\n\n// Version is a stand-in.\nconst Version = \"0\"\n",
		"domain/d/d.go":                       "// Package d is a domain package.\npackage d\n\n// N is a value.\nconst N = 1\n",
		"app/a/a.go":                          "// Package a is a use case.\npackage a\n\nimport \"threadbox/domain/d\"\n\n// N is d.N.\nconst N = d.N\n",
		"infra/i/i.go":                        "// Package i is an adapter.\npackage i\n\nimport \"threadbox/app/a\"\n\n// N is a.N.\nconst N = a.N\n",
		"web/w/w.go":                          "// Package w is a handler.\npackage w\n\nimport \"threadbox/app/a\"\n\n// N is a.N.\nconst N = a.N\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	write(t, dir, files)
	copyFile(t, dir, "Makefile")
	copyFile(t, dir, "scripts/lint.sh")
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	return dir
}

// testFile is a Go test file of package pkg that imports imp.
func testFile(pkg, imp string) string {
	return "package " + pkg + "\n\nimport (\n\t\"testing\"\n\n\t_ \"" + imp + "\"\n)\n\nfunc TestX(t *testing.T) {}\n"
}

// sentinels is a use case with two sentinel errors and a service.
const sentinels = "// Package b is a use case.\npackage b\n\nimport \"errors\"\n\n// ErrGone and ErrBusy are sentinels.\nvar (\n\tErrGone = errors.New(\"gone\")\n\tErrBusy = errors.New(\"busy\")\n)\n\n// Service is a use case.\ntype Service struct{}\n"

// useCase is package c, importing threadbox/app/b under alias (none when
// empty) and using the expressions uses of it.
func useCase(alias, uses string) string {
	imp := "\"threadbox/app/b\""
	if alias != "" {
		imp = alias + " " + imp
	}
	return "// Package c is a use case.\npackage c\n\nimport " + imp + "\n\n// Uses are what c takes from b.\nvar Uses = []any{" + uses + "}\n"
}

// The references the content checks look for, built from parts so that
// this file itself holds none of them.
var (
	outside  = ".." + "/shared/spec/CONTR" + "ACT.md"
	issueRef = "iss" + "ue 12"
	stopRef  = "st" + "op 7"
	testName = "TestIss" + "ue12"
)

// TestMakeLint runs `make lint` over small modules, each breaking (or
// keeping) one of its rules once, and checks that it fails naming the
// package, the file and the offending import (or the file and line), or
// passes.
func TestMakeLint(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	tests := []struct {
		name  string
		extra map[string]string
		want  string // "" means lint passes
	}{
		{"clean", nil, ""},
		{"app test imports infra", map[string]string{"app/a/a_test.go": testFile("a", "threadbox/infra/i")},
			"threadbox/app/a (a_test.go) imports threadbox/infra/i"},
		{"app external test imports infra", map[string]string{"app/a/x_test.go": testFile("a_test", "threadbox/infra/i")},
			"threadbox/app/a (x_test.go) imports threadbox/infra/i"},
		{"app code imports infra", map[string]string{"app/b/b.go": "// Package b is a use case.\npackage b\n\nimport _ \"threadbox/infra/i\"\n"},
			"threadbox/app/b (b.go) imports threadbox/infra/i"},
		{"app test imports web", map[string]string{"app/a/a_test.go": testFile("a", "threadbox/web/w")},
			"threadbox/app/a (a_test.go) imports threadbox/web/w"},
		{"web test imports infra", map[string]string{"web/w/w_test.go": testFile("w", "threadbox/infra/i")},
			"threadbox/web/w (w_test.go) imports threadbox/infra/i"},
		{"domain test imports app", map[string]string{"domain/d/d_test.go": testFile("d", "threadbox/app/a")},
			"threadbox/domain/d (d_test.go) imports threadbox/app/a"},
		{"domain test imports a module", map[string]string{"domain/d/d_test.go": testFile("d", "github.com/docker/docker/client")},
			"threadbox/domain/d (d_test.go) imports github.com/docker/docker/client"},
		{"domain test imports domain and the standard library", map[string]string{"domain/e/e.go": "// Package e is a domain package.\npackage e\n",
			"domain/d/d_test.go": testFile("d", "threadbox/domain/e")}, ""},
		{"infra test imports app", map[string]string{"infra/i/i_test.go": testFile("i", "threadbox/app/a")}, ""},
		{"Docker SDK outside infra/sandbox/docker", map[string]string{"cmd/bench/main.go": "// Command bench is a stand-in.\npackage main\n\nimport _ \"github.com/docker/docker/client\"\n\nfunc main() {}\n"},
			"threadbox/cmd/bench (main.go) imports github.com/docker/docker/client"},
		{"Docker SDK in another infra test", map[string]string{"infra/i/i_test.go": testFile("i", "github.com/docker/docker/client")},
			"threadbox/infra/i (i_test.go) imports github.com/docker/docker/client"},
		{"Docker SDK in infra/sandbox/docker and its tests", map[string]string{
			"infra/sandbox/docker/docker.go":      "// Package docker is the backend.\npackage docker\n\nimport _ \"github.com/docker/docker/client\"\n",
			"infra/sandbox/docker/docker_test.go": testFile("docker", "github.com/docker/docker/client"),
		}, ""},
		{"use case imports a sibling only for a sentinel", map[string]string{"app/b/b.go": sentinels,
			"app/c/c.go": useCase("", "b.ErrGone")},
			"threadbox/app/c (c.go) imports threadbox/app/b only for ErrGone"},
		{"use case imports a sibling under an alias only for sentinels", map[string]string{"app/b/b.go": sentinels,
			"app/c/c.go": useCase("bb", "bb.ErrGone, bb.ErrBusy")},
			"threadbox/app/c (c.go) imports threadbox/app/b only for ErrBusy,ErrGone"},
		{"use case test imports a sibling only for a sentinel", map[string]string{"app/b/b.go": sentinels,
			"app/a/a_test.go": "package a\n\nimport (\n\t\"errors\"\n\t\"testing\"\n\n\t\"threadbox/app/b\"\n)\n\nfunc TestX(t *testing.T) { _ = errors.Is(nil, b.ErrGone) }\n"},
			"threadbox/app/a (a_test.go) imports threadbox/app/b only for ErrGone"},
		{"use case imports a sibling for more than a sentinel", map[string]string{"app/b/b.go": sentinels,
			"app/c/c.go": useCase("", "b.ErrGone, b.Service{}")}, ""},
		{"use case's subpackage imports it for a sentinel", map[string]string{"app/b/b.go": sentinels,
			"app/b/sub/sub.go": "// Package sub is part of b.\npackage sub\n\nimport \"threadbox/app/b\"\n\n// Err is b.ErrGone.\nvar Err = b.ErrGone\n"}, ""},
		{"a file points outside the repository", map[string]string{"docs/x.md": "# X\n\nSee " + outside + ".\n"},
			"docs/x.md:3:"},
		{"an issue number in a comment", map[string]string{"app/a/n.go": "package a\n\n// M is fixed (" + issueRef + ").\nconst M = 2\n"},
			"app/a/n.go:3:"},
		{"a work-log stop in the docs", map[string]string{"docs/y.md": "# Y\n\nMeasured in " + stopRef + ".\n"},
			"docs/y.md:3:"},
		{"an issue number in a test name", map[string]string{"app/a/a_test.go": "package a\n\nimport \"testing\"\n\nfunc " + testName + "(t *testing.T) {}\n"},
			"app/a/a_test.go:5:"},
		{"numbers beside words that are no issue or stop", map[string]string{"app/a/n.go": "package a\n\n// stop1 and stop2 stop the two servers; at most 64 issues are kept.\nconst M = 2\n"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := module(t, tt.extra)
			cmd := exec.Command("make", "-s", "lint")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if tt.want == "" {
				if err != nil || strings.Contains(string(out), "dependency rule") {
					t.Fatalf("make lint: %v, want it to pass:\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("make lint passed, want it to fail naming %q:\n%s", tt.want, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Fatalf("make lint failed without naming %q:\n%s", tt.want, out)
			}
		})
	}
}

// TestMakeRun: make run hands the machine to `threadbox dev`, which
// chooses and prepares the sandbox backend (TestDevPrepare in
// cmd/threadbox); the environment reaches it as the user set it.
func TestMakeRun(t *testing.T) {
	for _, env := range []string{"", "docker"} {
		t.Run("SANDBOX_BACKEND="+env, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, dir, "Makefile")
			bin := filepath.Join(dir, "fakebin")
			write(t, bin, map[string]string{"threadbox": "#!/bin/sh\necho \"served: SANDBOX_BACKEND=$SANDBOX_BACKEND args=$*\"\n"})
			if err := os.Chmod(filepath.Join(bin, "threadbox"), 0o755); err != nil {
				t.Fatal(err)
			}
			// -o build: the stand-in is the binary; nothing is compiled.
			cmd := exec.Command("make", "-s", "-o", "build", "run", "BIN="+bin)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SANDBOX_BACKEND="+env)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make run: %v\n%s", err, out)
			}
			if want := "served: SANDBOX_BACKEND=" + env + " args=dev"; !strings.Contains(string(out), want) {
				t.Errorf("make run printed\n%s\nwant a line %q", out, want)
			}
		})
	}
}
