package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// privateDockerd is a Docker daemon of the soak's own (-private-dockerd),
// so that the docker-restart fault restarts a daemon that serves nobody
// else: on a shared machine, restarting the host's daemon (without live
// restore) would kill every other user's containers.
type privateDockerd struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// sock is the daemon's socket; DOCKER_HOST names it.
func (d *privateDockerd) sock() string { return filepath.Join(d.dir, "docker.sock") }

// startPrivateDockerd starts a daemon keeping its state in dir (kept
// between runs: the sandbox image is loaded into it once, from the host's
// daemon), points DOCKER_HOST at it for the soak's docker commands and the
// server, and makes sure it has image.
func startPrivateDockerd(ctx context.Context, dir, image string) (*privateDockerd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("-private-dockerd needs root")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d := &privateDockerd{dir: dir}
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	// Load the image from the host's daemon when this one lacks it.
	if exec.CommandContext(ctx, "docker", "-H", "unix://"+d.sock(), "image", "inspect", image).Run() != nil {
		fmt.Fprintf(os.Stderr, "soak: loading %s into the private Docker daemon\n", image)
		load := exec.CommandContext(ctx, "sh", "-c", "docker save "+image+" | docker -H unix://"+d.sock()+" load")
		if out, err := load.CombinedOutput(); err != nil {
			d.stop()
			return nil, fmt.Errorf("load %s into the private daemon: %w: %s", image, err, out)
		}
	}
	os.Setenv("DOCKER_HOST", "unix://"+d.sock())
	return d, nil
}

// start runs dockerd and waits until it answers.
func (d *privateDockerd) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	d.cmd = exec.Command("dockerd", "--data-root", filepath.Join(d.dir, "root"), "--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "dockerd.pid"), "-H", "unix://"+d.sock(),
		"--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false")
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// A network namespace of its own: a daemon shares the host's links
	// otherwise, and one started with --bridge=none deletes the host's
	// docker0 (the host daemon's default bridge) at start.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNET}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start dockerd: %w", err)
	}
	logf.Close()
	d.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(d.cmd, d.done)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if exec.CommandContext(ctx, "docker", "-H", "unix://"+d.sock(), "version").Run() == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("dockerd exited at start (see %s)", filepath.Join(d.dir, "dockerd.log"))
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return errors.New("the private dockerd did not answer within 60s")
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// stop ends the daemon (SIGTERM, then SIGKILL after 30 s); without live
// restore its containers stop with it.
func (d *privateDockerd) stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.cmd = nil
}

// restart is the docker-restart fault on the private daemon.
func (d *privateDockerd) restart(ctx context.Context) error {
	d.stop()
	return d.start(ctx)
}

// close stops the daemon at the end of the run and reports mounts it left
// under its folder.
func (d *privateDockerd) close() error {
	d.stop()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var left []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], d.dir+"/") {
			left = append(left, f[4])
		}
	}
	for i := len(left) - 1; i >= 0; i-- {
		_ = exec.Command("umount", "-l", left[i]).Run()
	}
	if len(left) > 0 {
		return fmt.Errorf("the private dockerd left %d mounts (unmounted): %s", len(left), strings.Join(left, ", "))
	}
	return nil
}
