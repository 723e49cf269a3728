package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"

	"threadbox/infra/sandbox/hostdirs"
)

// SocketMount is where a sandbox sees the host folder of its agent socket
// (read-only); the agent dials SocketMount/agent.sock.
const SocketMount = "/run/threadbox"

const (
	socketName = "agent.sock"
	// maxSocketPath is the longest path a unix socket can be bound to
	// (sun_path holds 108 bytes with the terminating NUL).
	maxSocketPath = 107
)

// socketDir returns the host folder of id's agent socket, or "" when the
// sandbox talks over its attached stdio: no Config.SocketDir, a runtime other
// than runc (gVisor keeps host sockets out), or a path too long to bind.
func (b *Backend) socketDir(id string) string {
	if b.cfg.SocketDir == "" || b.cfg.Runtime != DefaultRuntime {
		return ""
	}
	sum := sha256.Sum256([]byte(b.cfg.Instance + "\x00" + id))
	dir := filepath.Join(b.cfg.SocketDir, hex.EncodeToString(sum[:8]))
	if len(dir)+1+len(socketName) > maxSocketPath {
		b.log.Warn("agent socket path too long; using stdio", "dir", dir)
		return ""
	}
	return dir
}

// socketSource returns the host folder mounted at SocketMount in a
// container, or "".
func socketSource(in container.InspectResponse) string {
	for _, m := range in.Mounts {
		if m.Destination == SocketMount {
			return m.Source
		}
	}
	return ""
}

// listenAgent listens on the agent socket in dir (made if missing). The
// folder is the host's and mounted read-only, so nothing in the sandbox can
// replace the socket; only root and the sandbox user may connect to it.
func listenAgent(dir string) (*net.UnixListener, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	path := filepath.Join(dir, socketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	mode := os.FileMode(0o600)
	if err := os.Chown(path, hostdirs.SandboxUID, hostdirs.SandboxGID); err != nil {
		mode = 0o666 // not root: the peer check below still holds
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	return ln, nil
}

// hostsFile is the sandbox's /etc/hosts, bound read-only from its socket
// folder: a container without networking gets none from the daemon, and
// programs in the sandbox reach their own servers by the name localhost.
const hostsFile = `127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
ff00::0	ip6-mcastprefix
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
`

// writeHosts writes the sandbox's /etc/hosts in its socket folder dir and
// returns its path.
func writeHosts(dir string) (string, error) {
	path := filepath.Join(dir, "hosts")
	if err := os.WriteFile(path, []byte(hostsFile), 0o644); err != nil {
		return "", fmt.Errorf("hosts file: %w", err)
	}
	return path, nil
}

// errNoAgent reports that no acceptable agent connected in time.
var errNoAgent = errors.New("the agent did not connect to its socket")

// acceptAgent waits for the sandbox's agent on ln until ctx ends or gone is
// closed, and closes ln. A connection counts only when its peer is the
// container's init process: initPid yields that pid as the host sees it
// (from inspect). A peer outside this process's pid namespace shows as pid 0
// and cannot be told apart; it is taken only when fresh is true, at boot,
// when the agent is the only process in the sandbox.
func acceptAgent(ctx context.Context, ln *net.UnixListener, gone <-chan struct{}, initPid func() (int, error), fresh bool) (*net.UnixConn, error) {
	defer ln.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
		case <-gone:
		case <-stop:
		}
		ln.Close()
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", errNoAgent, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %w", errNoAgent, err)
		}
		pid, err := peerPid(c)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("agent socket: peer: %w", err)
		}
		want, err := initPid()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("agent socket: %w", err)
		}
		if (pid != 0 && pid == want) || (pid == 0 && fresh) {
			return c, nil
		}
		// Another process (a command of this sandbox, after a host
		// restart) reached the socket: it is not the agent.
		c.Close()
	}
}

// initPidFrom returns the init's pid that ch gives (once; closed empty when
// the container could not be inspected), for every connection acceptAgent
// checks: the first one to reach the socket may not be the agent's, and a
// second read of ch would find it closed.
func initPidFrom(ch <-chan int) func() (int, error) {
	return sync.OnceValues(func() (int, error) {
		if pid, ok := <-ch; ok {
			return pid, nil
		}
		return 0, errors.New("cannot inspect the container for its init pid")
	})
}

// peerPid returns the pid of the process at the other end of c, as this
// process's pid namespace sees it (0 when it cannot see it).
func peerPid(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

// closers closes every one of its members.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
