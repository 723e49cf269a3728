package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"syscall"

	"threadbox/domain/sandbox"
)

// warmRoot runs the warm pool's warm-up command (sandbox.WarmUpCommand)
// in the root filesystem mounted at root, as the commands' user, through
// the reaper, and waits for its end. A microVM template does it before it
// is saved: the shell and its libraries it reads stay in the guest's page
// cache, which every copy restored from the template starts with.
func (a *agent) warmRoot(root string) error {
	c := sandbox.WarmUpCommand
	bin, err := lookIn(root, c.Args[0])
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{Path: bin, Args: c.Args, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"},
		SysProcAttr: &syscall.SysProcAttr{Chroot: root, Credential: commandUser}}
	ctx, cancel := context.WithTimeout(a.ctx, c.Timeout)
	defer cancel()
	pid, exited, err := a.rp.start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		return err
	}
	_ = cmd.Process.Release()
	select {
	case ex := <-exited:
		if !ex.status.Exited() || ex.status.ExitStatus() != 0 {
			return fmt.Errorf("%q ended with status %#x", c.Args, ex.status)
		}
		return nil
	case <-ctx.Done():
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%q: %w", c.Args, ctx.Err())
	}
}

// lookIn finds name in the usual folders of the root filesystem mounted at
// root, and returns its path inside that root.
func lookIn(root, name string) (string, error) {
	for _, dir := range []string{"/usr/bin", "/bin"} {
		p := path.Join(dir, name)
		if fi, err := os.Stat(path.Join(root, p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not in the root filesystem's /usr/bin or /bin", name)
}
