package boxes

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"threadbox/infra/sandbox/agent"
)

// Proc is a running sandbox whose host process (bubblewrap, runsc, QEMU)
// this process started and reaps, with its agent connection: a backend's
// box embeds it for Agent, Done and StartedAt.
type Proc struct {
	Cmd    *exec.Cmd     // the host process, once started
	Client *agent.Client // the agent connection, once made
	Booted time.Time     // when the sandbox booted
	done   chan struct{} // closed when the host process has exited
}

// NewProc returns the Proc of a sandbox about to boot.
func NewProc() Proc {
	return Proc{done: make(chan struct{})}
}

// Agent returns the sandbox's agent connection.
func (p *Proc) Agent() Agent { return p.Client }

// Done is closed when the host process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// StartedAt returns when the sandbox booted.
func (p *Proc) StartedAt() time.Time { return p.Booted }

// Exited closes Done: the host process has exited.
func (p *Proc) Exited() { close(p.done) }

// Running reports whether the host process started and has not exited.
func (p *Proc) Running() bool {
	if p.Cmd == nil || p.Cmd.Process == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// KillGroup sends SIGKILL to the host process's group.
func (p *Proc) KillGroup() {
	if p.Cmd != nil && p.Cmd.Process != nil {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Start starts cmd as the host process, which outlives the request that
// boots the sandbox: in /, in a process group of its own that dies with
// this process. theirs, the process's ends of its pipes and sockets, are
// closed once it started or failed to. Then its output out is copied to
// log until it ends, and once it has exited, exited runs and Done is
// closed; wg counts both goroutines.
func (p *Proc) Start(cmd *exec.Cmd, theirs []*os.File, out io.ReadCloser, log io.Writer, wg *sync.WaitGroup, exited func()) error {
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err := cmd.Start()
	for _, f := range theirs {
		f.Close()
	}
	if err != nil {
		return err
	}
	p.Cmd = cmd
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(log, out)
		out.Close()
	}()
	go func() {
		defer wg.Done()
		_ = cmd.Wait()
		exited()
		p.Exited()
	}()
	return nil
}

// Alive reports whether the process pid exists: one this process may not
// signal exists too.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
