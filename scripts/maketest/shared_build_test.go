package maketest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestToolBuildsShareThreadboxsPackages: the Kubernetes test cluster's
// binary (scripts/k8s/build) and the S3 test server (scripts/s3server) are
// compiled from modules of their own, beside threadbox's compile on a new
// machine. Every package they import that threadbox imports too is at the
// version threadbox's go.mod gives, so that Go's build cache compiles it
// once for both: a version that drifts (threadbox's go.mod raised, say)
// compiles it, and every package above it, a second time. The one
// exception is fasthttp, which Fiber v2 pins below what the S3 server asks.
func TestToolBuildsShareThreadboxsPackages(t *testing.T) {
	threadbox := depVersions(t, repoRoot, "-test", "./...")
	for _, tool := range []struct {
		dir, pkg string
		apart    string // a module path prefix allowed to differ
	}{
		{dir: "scripts/k8s/build", pkg: "."},
		{dir: "scripts/s3server", pkg: "github.com/versity/versitygw/cmd/versitygw", apart: "github.com/valyala/fasthttp"},
	} {
		shared := 0
		for pkg, v := range depVersions(t, filepath.Join(repoRoot, tool.dir), tool.pkg) {
			tv, ok := threadbox[pkg]
			if !ok {
				continue
			}
			shared++
			if tv != v && (tool.apart == "" || !strings.HasPrefix(pkg, tool.apart)) {
				t.Errorf("%s compiles %s at %s, threadbox at %s: require %s in %s/go.mod", tool.dir, pkg, v, tv, tv, tool.dir)
			}
		}
		if shared == 0 {
			t.Errorf("%s shares no package with threadbox: the listing is wrong", tool.dir)
		}
	}
}

// depVersions returns the module version of every package outside the
// standard library and the main module that patterns, listed in dir,
// import (args before the patterns are go list's flags).
func depVersions(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{if and (not .Standard) .Module (not .Module.Main)}}{{.ImportPath}} {{.Module.Version}}{{end}}"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		// A test variant lists as "path [path.test]": the same package.
		if path, v, ok := strings.Cut(line, " "); ok {
			m[path] = strings.Fields(v)[len(strings.Fields(v))-1]
		}
	}
	return m
}
