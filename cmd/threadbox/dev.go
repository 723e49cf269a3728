package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"threadbox/infra/sandbox/gvisor"
)

// devDefaultBackends is SANDBOX_BACKEND of a development run when the
// variable is unset: Docker first, the local development jail after it.
const devDefaultBackends = "docker,local"

// devHost is what a development run asks the machine; tests replace it.
type devHost struct {
	// root reports whether this process runs as root.
	root bool
	// have reports whether a program is on PATH.
	have func(name string) bool
	// dockerErr is nil when a Docker daemon answers, else why not.
	dockerErr func(ctx context.Context) error
	// hasImage reports whether the Docker daemon has the image.
	hasImage func(ctx context.Context, image string) bool
	// recipe runs the offline build (sandbox/build-offline.sh) with args and
	// the environment additions env, its output going to out.
	recipe func(ctx context.Context, out io.Writer, env []string, args ...string) error
}

// realHost is the machine this process runs on, with the recipe script at
// path.
func realHost(path string) devHost {
	return devHost{
		root: os.Geteuid() == 0,
		have: func(name string) bool { _, err := exec.LookPath(name); return err == nil },
		dockerErr: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := exec.LookPath("docker"); err != nil {
				return errNoDockerCommand
			}
			if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
				return fmt.Errorf("the Docker daemon does not answer: %s", firstLine(string(out), err))
			}
			return nil
		},
		hasImage: func(ctx context.Context, image string) bool {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", image).Run() == nil
		},
		recipe: func(ctx context.Context, out io.Writer, env []string, args ...string) error {
			cmd := exec.CommandContext(ctx, path, args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stdout, cmd.Stderr = out, out
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w", strings.Join(append([]string{path}, args...), " "), err)
			}
			return nil
		},
	}
}

// firstLine is the first line of a command's output, or err when it printed
// nothing.
func firstLine(out string, err error) string {
	if l, _, _ := strings.Cut(strings.TrimSpace(out), "\n"); l != "" {
		return l
	}
	return err.Error()
}

// cmdDev is `threadbox dev`, the single-user development run `make run`
// starts: it prepares a sandbox backend (devPrepare), runs the doctor, and
// serves with the backends it chose.
func cmdDev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", "dev [--recipe sandbox/build-offline.sh]\n\nA single-user development run: builds the sandbox image (or, without Docker, the local\nbackend's root filesystem) when it is missing, checks the prerequisites, then serves.", stdout)
	recipe := fs.String("recipe", filepath.Join("sandbox", "build-offline.sh"), "the offline image recipe")
	cfg, err := parseAndLoad(fs, args, getenv)
	if err != nil {
		return err
	}
	list, err := devPrepare(ctx, cfg, getenv, *recipe, realHost(*recipe), stdout)
	if err != nil {
		return err
	}
	env := func(k string) string {
		if k == "SANDBOX_BACKEND" {
			if list == "" {
				return "," // no backend at all: loadConfig reads "" as its default
			}
			return list
		}
		return getenv(k)
	}
	_ = cmdDoctor(ctx, nil, env, stdout, stderr) // it prints what is wrong; serving goes on
	return cmdServe(ctx, nil, env, stdout, stderr)
}

// devPrepare decides the sandbox backends of a development run and
// prepares them; it returns the SANDBOX_BACKEND to serve with, "" meaning
// no backend (code execution off). An explicit SANDBOX_BACKEND is kept as
// it is; only the image or root filesystem it needs is prepared (the
// gvisor backend's: runsc, root, and the root filesystem). Otherwise:
//
//   - a Docker daemon that answers serves, its image built first when it is
//     missing (root and debootstrap needed): docker,local;
//   - else, with bubblewrap, the local development jail serves, its root
//     filesystem built first when it is missing (root and debootstrap
//     needed): local;
//   - else code execution is off, and one line says what to install.
//
// It prints what it does to out, one "threadbox dev:" line each.
func devPrepare(ctx context.Context, cfg Config, getenv func(string) string, recipe string, h devHost, out io.Writer) (string, error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, "threadbox dev: "+format+"\n", args...) }
	explicit := strings.TrimSpace(getenv("SANDBOX_BACKEND"))
	list := explicit
	if list == "" {
		list = devDefaultBackends
	}
	names := strings.Split(list, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	cache := recipeCache(getenv, cfg.DataDir)
	// The recipe reads its settings from the environment: this run's. Its
	// cache is where the estimate and the local backend look
	// (recipeCache, local.FindRootFS): DATA_DIR only when it is set.
	env := []string{"SANDBOX_IMAGE=" + cfg.SandboxImage}
	if getenv("DATA_DIR") != "" {
		env = append(env, "DATA_DIR="+cfg.DataDir)
	}
	for _, k := range []string{"THREADBOX_CACHE_DIR", "MIRROR"} {
		if v := getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	canBuild := h.root && h.have("debootstrap")

	dockerOK := false
	var dockerWhy string
	if slices.Contains(names, "docker") {
		switch err := h.dockerErr(ctx); {
		case err != nil:
			dockerWhy = err.Error()
		case h.hasImage(ctx, cfg.SandboxImage):
			dockerOK = true
		case !canBuild:
			dockerWhy = "the sandbox image " + cfg.SandboxImage + " is missing, and building it needs root and debootstrap"
		default:
			say("no sandbox image %s: building it from Debian's packages, %s", cfg.SandboxImage, estimate(recipe, cache))
			if err := build(ctx, h, out, say, env); err != nil {
				dockerWhy = "the image build failed: " + err.Error()
			} else if h.hasImage(ctx, cfg.SandboxImage) {
				dockerOK = true
			} else {
				dockerWhy = "the image build ended without the image " + cfg.SandboxImage
			}
		}
		if !dockerOK {
			say("the docker backend cannot be used: %s", dockerWhy)
		}
	}
	localOK, rootfsBuilt := false, false
	if slices.Contains(names, "local") && !dockerOK && h.have("bwrap") {
		switch {
		case cfg.RootFS != "":
			localOK = true
		case canBuild:
			say("no root filesystem for the local backend: building it from Debian's packages, %s", estimate(recipe, cache))
			if err := build(ctx, h, out, say, env, "--rootfs-only"); err != nil {
				say("the local backend cannot be used: the root filesystem build failed: %v", err)
			} else {
				localOK, rootfsBuilt = true, true
			}
		}
	}
	// The gvisor backend runs runsc itself, as root, over the same root
	// filesystem as the local backend.
	if slices.Contains(names, "gvisor") {
		switch {
		case !h.root:
			say("the gvisor backend cannot be used: it runs runsc itself, which needs root")
		case !h.have(gvisor.DefaultRunsc):
			say("the gvisor backend cannot be used: runsc is not installed (`apt-get install runsc`, or scripts/ci-docker.sh)")
		case cfg.RootFS != "" || rootfsBuilt:
		case canBuild:
			say("no root filesystem for the gvisor backend: building it from Debian's packages, %s", estimate(recipe, cache))
			if err := build(ctx, h, out, say, env, "--rootfs-only"); err != nil {
				say("the gvisor backend cannot be used: the root filesystem build failed: %v", err)
			}
		default:
			say("the gvisor backend cannot be used: it needs the sandbox root filesystem, and building it needs debootstrap")
		}
	}

	switch {
	case explicit != "":
		say("SANDBOX_BACKEND=%s (as set)", explicit)
		return explicit, nil
	case dockerOK:
		say("SANDBOX_BACKEND=%s: Docker sandboxes, the local development jail as the fallback (not for untrusted code)", list)
		return list, nil
	case localOK:
		say("SANDBOX_BACKEND=local: running the development jail (bubblewrap on this host's kernel, for trusted development only, not a sandbox for untrusted code)")
		return "local", nil
	}
	say("%s", offLine(h, dockerWhy))
	return "", nil
}

// errNoDockerCommand is the docker backend's reason when the docker
// command is not installed.
var errNoDockerCommand = errors.New("the docker command is not installed")

// offLine is the one line a development run prints when no sandbox
// backend can serve: code execution is off, and what to install (or do)
// for either backend, naming only what this machine lacks.
func offLine(h devHost, dockerWhy string) string {
	var dockerNeeds, localNeeds, todo []string
	if dockerWhy == errNoDockerCommand.Error() {
		dockerNeeds = append(dockerNeeds, "docker.io")
	}
	if !h.have("debootstrap") {
		dockerNeeds = append(dockerNeeds, "debootstrap")
		localNeeds = append(localNeeds, "debootstrap")
	}
	if !h.have("bwrap") {
		localNeeds = append(localNeeds, "bubblewrap")
	}
	if len(dockerNeeds) > 0 {
		todo = append(todo, "for Docker sandboxes `apt-get install "+strings.Join(dockerNeeds, " ")+"`")
	}
	if strings.HasPrefix(dockerWhy, "the Docker daemon does not answer") {
		todo = append(todo, "start the Docker daemon")
	}
	if len(localNeeds) > 0 {
		todo = append(todo, "for the development jail `apt-get install "+strings.Join(localNeeds, " ")+"`")
	}
	if !h.root {
		todo = append(todo, "run make run as root (the image and root filesystem builds need it)")
	}
	if len(todo) == 0 {
		todo = append(todo, "the builds above failed: fix what their output names, then make run again")
	}
	return fmt.Sprintf("code execution is off (no sandbox backend; every code tool answers %q): %s",
		"code_execution provider is not configured.", strings.Join(todo, "; "))
}

// build runs the recipe with args, printing its output and, every 30
// seconds, the time it has taken.
func build(ctx context.Context, h devHost, out io.Writer, say func(string, ...any), env []string, args ...string) error {
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				say("still building: %s so far", time.Since(start).Round(time.Second))
			}
		}
	}()
	err := h.recipe(ctx, out, env, args...)
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	say("built in %s", time.Since(start).Round(time.Second))
	return nil
}

// recipeCache is the offline build's cache folder, by the script's rule:
// THREADBOX_CACHE_DIR, else DATA_DIR/cache, else /var/cache/threadbox.
func recipeCache(getenv func(string) string, dataDir string) string {
	if v := getenv("THREADBOX_CACHE_DIR"); v != "" {
		return v
	}
	if getenv("DATA_DIR") != "" {
		return filepath.Join(dataDir, "cache")
	}
	return "/var/cache/threadbox"
}

// recipeHash is the offline build's recipe hash (its script's rule: the
// sha256 of build-offline.sh, packages.txt and rootfs-setup.sh, in that
// order), or "" when a file cannot be read.
func recipeHash(recipe string) string {
	h := sha256.New()
	dir := filepath.Dir(recipe)
	for _, f := range []string{filepath.Base(recipe), "packages.txt", "rootfs-setup.sh"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return ""
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// estimate says how long a build will take: a root filesystem of this
// recipe in the cache leaves only the import.
func estimate(recipe, cache string) string {
	if hash := recipeHash(recipe); hash != "" {
		if _, err := os.Stat(filepath.Join(cache, "sandbox-rootfs", hash, ".threadbox-complete")); err == nil {
			return "about 30 seconds (this recipe's root filesystem is cached in " + cache + ")"
		}
	}
	return "about 10 minutes (debootstrap and the packages of sandbox/packages.txt, once; then cached in " + cache + ")"
}
