package boxes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// CheckAgentBin says what keeps the agent binary at path from serving
// sandboxes, or nil.
func CheckAgentBin(path string) error {
	if path == "" {
		return errors.New("no agent binary configured (build it with `make agent`)")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("agent binary (build it with `make agent`): %w", err)
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("agent binary %s is not executable", path)
	}
	return nil
}

// CheckRootFS says what keeps dir, the sandbox image's root filesystem
// folder, from serving sandboxes, or nil.
func CheckRootFS(dir string) error {
	if dir == "" {
		return errors.New("no root filesystem (set THREADBOX_ROOTFS, or build it with `sandbox/build-offline.sh --rootfs-only`)")
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin", "bash")); err != nil || fi.IsDir() {
		return fmt.Errorf("root filesystem %s has no /bin/bash (build it with `sandbox/build-offline.sh --rootfs-only`)", dir)
	}
	return nil
}

// Handshake waits, at most timeout, for the first answer of a booting
// sandbox's agent a; done is closed when the sandbox ended.
func Handshake(ctx context.Context, timeout time.Duration, a interface{ Ping(context.Context) error }, done <-chan struct{}) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Ping(pctx) }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("agent handshake: %w", err)
		}
		return nil
	case <-done:
		return errors.New("agent handshake: the sandbox ended during boot")
	}
}
