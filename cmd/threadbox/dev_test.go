package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/sandboxtest"
)

// fakeHost is a devHost whose answers a test sets; it records the recipe
// runs.
type fakeHost struct {
	root       bool
	programs   []string // on PATH
	docker     bool     // a daemon answers
	image      bool     // the daemon has the image
	buildFails bool
	runs       [][]string // the recipe's arguments, one entry per run
	env        []string   // the recipe's environment additions, of the last run
}

func (f *fakeHost) host() devHost {
	return devHost{
		root: f.root,
		have: func(name string) bool { return slices.Contains(f.programs, name) },
		dockerErr: func(ctx context.Context) error {
			if !f.docker {
				return errNoDockerCommand
			}
			return nil
		},
		hasImage: func(ctx context.Context, image string) bool { return f.image },
		recipe: func(ctx context.Context, out io.Writer, env []string, args ...string) error {
			f.runs = append(f.runs, append([]string{}, args...))
			f.env = env
			if f.buildFails {
				return errFake("debootstrap failed")
			}
			if len(args) == 0 {
				f.image = true
			}
			return nil
		},
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }

// TestDevPrepare checks the backends a development run chooses on each
// kind of machine, what it builds, and what it says.
func TestDevPrepare(t *testing.T) {
	tests := []struct {
		name     string
		host     fakeHost
		rootfs   string // an existing root filesystem
		explicit string // SANDBOX_BACKEND
		want     string
		runs     [][]string
		says     []string // substrings of the output, in order
		lines    int      // the output's line count, when not 0
	}{
		{name: "docker with its image", host: fakeHost{docker: true, image: true, programs: []string{"bwrap"}},
			want: "docker,local", says: []string{"SANDBOX_BACKEND=docker,local: Docker sandboxes"}, lines: 1},
		{name: "docker without the image, as root with debootstrap: the image is built", host: fakeHost{root: true, docker: true, programs: []string{"debootstrap"}},
			want: "docker,local", runs: [][]string{{}}, says: []string{"no sandbox image threadbox-sandbox:latest: building it from Debian's packages, about ", "built in", "SANDBOX_BACKEND=docker,local"}},
		{name: "the image build fails: the jail's root filesystem is tried", host: fakeHost{root: true, docker: true, buildFails: true, programs: []string{"debootstrap", "bwrap"}},
			want: "", runs: [][]string{{}, {"--rootfs-only"}}, says: []string{"the docker backend cannot be used: the image build failed", "the local backend cannot be used", "code execution is off", "the builds above failed"}},
		{name: "no docker, as root with debootstrap and bubblewrap: the jail's root filesystem is built", host: fakeHost{root: true, programs: []string{"debootstrap", "bwrap"}},
			want: "local", runs: [][]string{{"--rootfs-only"}}, says: []string{"the docker backend cannot be used: the docker command is not installed", "no root filesystem for the local backend: building it", "built in", "running the development jail"}},
		{name: "no docker, a root filesystem and bubblewrap, not root", host: fakeHost{programs: []string{"bwrap"}}, rootfs: "/srv/rootfs",
			want: "local", says: []string{"running the development jail"}},
		{name: "nothing: code execution off, one line of what to install", host: fakeHost{},
			want: "", says: []string{"the docker backend cannot be used", "code execution is off (no sandbox backend; every code tool answers \"code_execution provider is not configured.\"): for Docker sandboxes `apt-get install docker.io debootstrap`; for the development jail `apt-get install debootstrap bubblewrap`; run make run as root (the image and root filesystem builds need it)\n"}, lines: 2},
		{name: "docker without the image, not root: off, saying so", host: fakeHost{docker: true, programs: []string{"debootstrap", "bwrap"}},
			want: "", says: []string{"the sandbox image threadbox-sandbox:latest is missing, and building it needs root and debootstrap", "code execution is off (no sandbox backend; every code tool answers \"code_execution provider is not configured.\"): run make run as root (the image and root filesystem builds need it)\n"}},
		{name: "gvisor as set, as root with runsc and debootstrap: its root filesystem is built", host: fakeHost{root: true, programs: []string{"debootstrap", "runsc"}}, explicit: "gvisor",
			want: "gvisor", runs: [][]string{{"--rootfs-only"}}, says: []string{"no root filesystem for the gvisor backend: building it", "built in", "SANDBOX_BACKEND=gvisor (as set)"}},
		{name: "gvisor as set, with its root filesystem: nothing to build", host: fakeHost{root: true, programs: []string{"runsc"}}, rootfs: "/srv/rootfs", explicit: "gvisor",
			want: "gvisor", says: []string{"SANDBOX_BACKEND=gvisor (as set)"}, lines: 1},
		{name: "gvisor as set, without runsc: says so", host: fakeHost{root: true, programs: []string{"debootstrap"}}, explicit: "gvisor",
			want: "gvisor", says: []string{"the gvisor backend cannot be used: runsc is not installed", "SANDBOX_BACKEND=gvisor (as set)"}},
		{name: "gvisor as set, not root: says so", host: fakeHost{programs: []string{"runsc"}}, rootfs: "/srv/rootfs", explicit: "gvisor",
			want: "gvisor", says: []string{"the gvisor backend cannot be used: it runs runsc itself, which needs root", "SANDBOX_BACKEND=gvisor (as set)"}},
		{name: "an explicit list is kept, its image built", host: fakeHost{root: true, docker: true, programs: []string{"debootstrap"}}, explicit: "docker",
			want: "docker", runs: [][]string{{}}, says: []string{"building it", "SANDBOX_BACKEND=docker (as set)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"SANDBOX_BACKEND": tt.explicit, "DATA_DIR": t.TempDir(), "THREADBOX_CACHE_DIR": "/srv/cache"}
			cfg := Config{DataDir: env["DATA_DIR"], SandboxImage: "threadbox-sandbox:latest", RootFS: tt.rootfs}
			var out bytes.Buffer
			h := tt.host
			got, err := devPrepare(context.Background(), cfg, func(k string) string { return env[k] }, "../../sandbox/build-offline.sh", h.host(), &out)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("backends %q, want %q\n%s", got, tt.want, out.String())
			}
			if !slices.EqualFunc(h.runs, tt.runs, slices.Equal) {
				t.Errorf("recipe runs %q, want %q", h.runs, tt.runs)
			}
			// The recipe builds where this run looks: its data, cache and image.
			if want := []string{"SANDBOX_IMAGE=threadbox-sandbox:latest", "DATA_DIR=" + env["DATA_DIR"], "THREADBOX_CACHE_DIR=/srv/cache"}; len(h.runs) > 0 && !slices.Equal(h.env, want) {
				t.Errorf("recipe environment %q, want %q", h.env, want)
			}
			rest := out.String()
			for _, s := range tt.says {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%s", s, out.String())
				}
				rest = rest[i+len(s):]
			}
			if n := strings.Count(out.String(), "\n"); tt.lines != 0 && n != tt.lines {
				t.Errorf("%d lines, want %d:\n%s", n, tt.lines, out.String())
			}
		})
	}
}

// TestCodeExecutionOff: a server with no sandbox backend (what a
// development run chooses when neither backend can serve) says so in its
// log, answers a chat turn's code block with the contract's "not
// configured" error, and leaves the org's policy as it was.
func TestCodeExecutionOff(t *testing.T) {
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": ",", "LOG_LEVEL": "warn", "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	before := s.do("GET", appAPI+"/org/features", f.admin, nil)
	r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
		"content": "```bash\necho hello\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 || !strings.Contains(string(r.body), "code_execution provider is not configured.") || strings.Contains(string(r.body), "hello\\n") {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	if after := s.do("GET", appAPI+"/org/features", f.admin, nil); after.status != 200 || !bytes.Equal(after.body, before.body) {
		t.Errorf("the org's policy changed: %s, then %s", before.body, after.body)
	}
	warned := false
	for _, l := range logLines(t, s) {
		warned = warned || strings.HasPrefix(l.Msg, "code execution is off: no sandbox backend is configured")
	}
	if !warned {
		t.Errorf("no start-up line says code execution is off:\n%s", s.stderr.String())
	}
}

// TestDevBuildsMissingImage is the first-run test: `threadbox dev`
// (what `make run` runs) on a fresh DATA_DIR with an image name Docker
// does not have builds the image with the offline recipe and serves, and
// the first code block of a chat turn runs in it. The image name is a
// throwaway tag, removed at the end; the recipe's root filesystem must be
// in the cache (`make sandbox-image` leaves it there), so the build is the
// recipe's own import step (about 25 s here), not debootstrap.
func TestDevBuildsMissingImage(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "the offline build needs root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		missing(t, "debootstrap is missing: %v", err)
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		missing(t, "docker does not answer: %v %s", err, out)
	}
	bin := needAgent(t)
	recipe, err := filepath.Abs(filepath.Join("..", "..", "sandbox", "build-offline.sh"))
	if err != nil {
		t.Fatal(err)
	}
	hash := recipeHash(recipe)
	cache := recipeCache(os.Getenv, os.Getenv("DATA_DIR"))
	if _, err := os.Stat(filepath.Join(cache, "sandbox-rootfs", hash, ".threadbox-complete")); err != nil {
		missing(t, "the root filesystem of recipe %.12s is not cached in %s (make sandbox-image builds it): %v", hash, cache, err)
	}

	// The throwaway image, and the recipe's own tag, which the build
	// points at the image it makes: given back to the image it named.
	b := make([]byte, 6)
	rand.Read(b)
	image := "threadbox-devtest:" + hex.EncodeToString(b)
	recipeTag := "threadbox-sandbox:" + hash[:12]
	prevID := imageID(recipeTag)
	sandboxtest.Cleanup(t, func() {
		if prevID != "" {
			dockerCmd(t, "tag", prevID, recipeTag)
		} else if imageID(recipeTag) == imageID(image) {
			dockerCmd(t, "rmi", recipeTag)
		}
		if imageID(image) != "" {
			dockerCmd(t, "rmi", image)
		}
	})

	dir := t.TempDir()
	addr := freeAddr(t)
	s := &server{t: t, base: "http://" + addr, stdout: &syncBuffer{}, stderr: &syncBuffer{}, env: map[string]string{
		"LISTEN_ADDR":         addr,
		"DATA_DIR":            filepath.Join(dir, "data"),
		"THREADBOX_CACHE_DIR": cache,
		"SANDBOX_IMAGE":       image,
		"SANDBOX_DISK_QUOTA":  "none",
		"THREADBOX_AGENT_BIN": bin,
		"THREADBOX_INSTANCE":  "devtest" + hex.EncodeToString(b),
		"MODEL_PROVIDER":      "runner",
		"LOG_LEVEL":           "warn",
	}}
	s.dataDir = s.env["DATA_DIR"]
	sandboxtest.Cleanup(t, func() {
		_ = docker.RemoveInstance(context.Background(), s.env["THREADBOX_INSTANCE"], filepath.Join(s.dataDir, "pool"))
	})
	started := time.Now()
	s.run(t, []string{"dev", "--recipe", recipe}, 3*time.Minute)
	t.Logf("built and serving after %s", time.Since(started).Round(time.Second))
	out := s.stdout.String()
	for _, want := range []string{
		"threadbox dev: no sandbox image " + image + ": building it from Debian's packages, about 30 seconds",
		"==> [1] root filesystem for recipe " + hash[:12] + " is cached at " + cache,
		"threadbox dev: built in ",
		"threadbox dev: SANDBOX_BACKEND=docker,local",
		"ok   backend docker",
		"web login: ",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("the output lacks %q:\n%s", want, out)
		}
	}
	if imageID(image) == "" {
		t.Fatalf("no image %s after the build", image)
	}
	tok := regexp.MustCompile(`API token: (\S+)`).FindStringSubmatch(out)
	if tok == nil {
		t.Fatalf("no API token printed:\n%s", out)
	}
	r := s.do("POST", appAPI+"/project", tok[1], map[string]any{"name": "First"})
	if r.status != 201 {
		t.Fatalf("project: %d %s", r.status, r.body)
	}
	r = s.do("POST", appAPI+"/thread", tok[1], map[string]any{"project_id": r.json(t)["id"], "title": "First"})
	if r.status != 201 {
		t.Fatalf("thread: %d %s", r.status, r.body)
	}
	tid := r.json(t)["id"].(string)
	r = s.do("POST", appAPI+"/thread/"+tid+"/messages", tok[1], map[string]any{
		"content": "```bash\necho first-block-$((6*7))\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 || !strings.Contains(string(r.body), "first-block-42") {
		t.Fatalf("turn: %d %s\nlog:\n%s", r.status, r.body, s.stderr.String())
	}
	// It ran under Docker, in the image just built: so does every sandbox
	// of the instance (the warm pool's too, on by default).
	ps, err := exec.Command("docker", "ps", "--filter", "name=threadbox-"+s.env["THREADBOX_INSTANCE"]+"-", "--format", "{{.Image}}").Output()
	lines := strings.Fields(string(ps))
	if err != nil || len(lines) == 0 || slices.ContainsFunc(lines, func(l string) bool { return l != image }) {
		t.Errorf("the sandboxes' images: %q %v, want %s", ps, err, image)
	}
}

// imageID is the id of a Docker image, or "" when there is none.
func imageID(name string) string {
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// dockerCmd runs a docker command of a test's clean-up, reporting a failure.
func dockerCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Errorf("docker %s: %v %s", strings.Join(args, " "), err, out)
	}
}
