package microvm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
)

// Shares over virtiofs. QEMU saves no VM while a 9p share is mounted in
// it, so a VM whose running state is to be checkpointed has its root
// filesystem and folders served over virtiofs instead: one virtiofsd
// (Debian 13's, which the guest's build carries) per share, a child of
// this process confined to its folder (--sandbox chroot), reached by QEMU
// as a vhost-user device. virtiofsd puts the paths of the files the guest
// has open into QEMU's saved state (--migration-mode find-paths), and the
// virtiofsd of a restore opens them again; a file it cannot find again
// (deleted while open) fails in the guest, not the restore
// (--migration-on-error guest-error).
//
// Each connection is made before either end starts: a listening socket
// in a private folder of the state folder, connected to at once and
// unlinked, whose listening end virtiofsd inherits (--fd) and accepts,
// and whose connected end QEMU inherits (-chardev socket,fd=).

// GuestVirtiofsd returns the virtiofsd the guest artefacts of dir carry
// (the wrapper sandbox/microvm-guest.sh writes), or "" when dir has none.
func GuestVirtiofsd(dir string) string {
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, "virtiofsd")
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// virtiofsOK reports whether VMs of guest g can be served over virtiofs:
// a virtiofsd is configured and the guest loads the virtiofs module.
func (b *Backend) virtiofsOK(g Guest) bool {
	return b.cfg.Virtiofsd != "" && slices.Contains(g.Modules, "virtiofs")
}

// fsShare is one folder a virtiofsd serves: its tag in the guest, the host
// folder, whether the guest may only read it, and whether the guest may
// cache it (the root filesystem, which never changes under a VM).
type fsShare struct {
	tag, dir         string
	readOnly, cached bool
}

// fsShares returns the virtiofs shares of a VM: the root filesystem, then
// each of sh.
func (b *Backend) fsShares(sh []share) []fsShare {
	out := []fsShare{{tag: "root", dir: b.rootfs, readOnly: true, cached: true}}
	for i, m := range sh {
		out = append(out, fsShare{tag: "m" + strconv.Itoa(i), dir: m.Export, readOnly: m.ReadOnly})
	}
	return out
}

// virtiofsdArgs returns the command line of the virtiofsd of s, which
// takes its listening socket as descriptor 3.
func virtiofsdArgs(s fsShare) []string {
	args := []string{"--fd=3", "--shared-dir", s.dir, "--sandbox", "chroot",
		"--migration-mode", "find-paths", "--migration-on-error", "guest-error", "--log-level", "error",
		// A file handle per inode the guest holds, not an open descriptor:
		// a guest that walked more files than virtiofsd's limit on open
		// files (the host's hard limit where it may not raise it) got
		// "Too many open files in system" on every new file after.
		"--inode-file-handles=prefer"}
	if s.cached {
		args = append(args, "--cache", "always")
	} else {
		// Without a cache the host's writes (uploads, the Files API) show
		// at once, as over 9p; shared mappings of files stay possible.
		args = append(args, "--cache", "never", "--allow-mmap")
	}
	if s.readOnly {
		args = append(args, "--readonly")
	}
	return args
}

// fsDaemons are the virtiofsd processes of one VM.
type fsDaemons struct {
	mu    sync.Mutex
	procs []*os.Process
}

// kill ends them all.
func (d *fsDaemons) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.procs {
		_ = p.Kill()
	}
}

// startVirtiofsd starts a virtiofsd for each of shares and returns QEMU's
// ends of their connections, in order, for QEMU to inherit. The daemons
// end when QEMU's end closes, or by kill; b.wg waits for them.
func (b *Backend) startVirtiofsd(d *fsDaemons, shares []fsShare, log io.Writer) (qemuEnds []*os.File, err error) {
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, err
	}
	// Socket paths are short (a unix socket's path is at most 107 bytes):
	// a private folder of the state folder, a digit each.
	dir, err := os.MkdirTemp(b.dir, "fs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	defer func() {
		if err != nil {
			for _, f := range qemuEnds {
				f.Close()
			}
			d.kill()
		}
	}()
	for i, s := range shares {
		listening, connected, err := socketAt(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return qemuEnds, fmt.Errorf("virtiofsd %s: %w", s.tag, err)
		}
		qemuEnds = append(qemuEnds, connected)
		cmd := exec.Command(b.cfg.Virtiofsd, virtiofsdArgs(s)...)
		cmd.Dir = "/"
		cmd.Stdout, cmd.Stderr = log, log
		cmd.ExtraFiles = []*os.File{listening}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		listening.Close()
		if err != nil {
			return qemuEnds, fmt.Errorf("start %s: %w", b.cfg.Virtiofsd, err)
		}
		d.mu.Lock()
		d.procs = append(d.procs, cmd.Process)
		d.mu.Unlock()
		pid := cmd.Process.Pid
		b.fsdMu.Lock()
		if b.fsdRunning == nil {
			b.fsdRunning = map[int]bool{}
		}
		b.fsdRunning[pid] = true
		b.fsdMu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			_ = cmd.Wait()
			b.fsdMu.Lock()
			delete(b.fsdRunning, pid)
			b.fsdMu.Unlock()
		}()
	}
	return qemuEnds, nil
}

// socketAt listens on a unix socket at path, connects to it, and unlinks
// it: the listening end (with the connection waiting to be accepted) and
// the connected end, as files to inherit.
func socketAt(path string) (listening, connected *os.File, err error) {
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close() // unlinks path; the files below are copies
	c, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	if listening, err = l.File(); err != nil {
		return nil, nil, err
	}
	if connected, err = c.File(); err != nil {
		listening.Close()
		return nil, nil, err
	}
	return listening, connected, nil
}

// errNotVirtiofs is the answer of a checkpoint of a VM whose shares are 9p.
var errNotVirtiofs = errors.New("its root filesystem and folders are 9p shares (a warm VM), which QEMU cannot save mounted: it keeps files only")
