package local

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A jail's seccomp filter. bubblewrap loads it (--seccomp FD) just before it
// runs the agent, so it binds the agent and every command. It denies, with
// EPERM, the system calls Docker's default profile denies to a container
// without capabilities: kernel modules and kexec, mounts and the new mount
// API, namespaces (setns; unshare and clone with a namespace flag, so no
// nested user namespace hands code a full set of capabilities over its own
// mounts), keyrings, bpf, perf_event_open, userfaultfd, io_uring, the clock
// and swap, reboot, quotas, handles of other files (open_by_handle_at),
// other processes' memory (process_vm_readv/writev, pidfd_getfd), attaching
// ptrace to a running process (PTRACE_ATTACH, PTRACE_SEIZE; a debugger may
// still run its own child, PTRACE_TRACEME), and on x86-64 the i386 and x32
// system call ABIs, whose numbers the filter does not check. clone3 answers
// ENOSYS, as under Docker: its flags are in memory the filter cannot read,
// and the C library then falls back to clone.
//
// The program is classic BPF built by the small assembler below: the server
// is built without cgo (CGO_ENABLED=0), which rules out libseccomp, and a
// filter this short needs nothing more than golang.org/x/sys/unix, a
// dependency already.

// seccompFD is the descriptor the jail's wrapper gets the filter on
// (exec.Cmd.ExtraFiles[0]).
const seccompFD = 3

// deniedSyscalls are the calls a jail's code gets EPERM for, whatever their
// arguments; seccompArch's file adds those of one architecture.
var deniedSyscalls = append([]uint32{
	unix.SYS_ACCT, unix.SYS_ADD_KEY, unix.SYS_BPF, unix.SYS_CLOCK_ADJTIME, unix.SYS_CLOCK_SETTIME,
	unix.SYS_DELETE_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_INIT_MODULE,
	unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSOPEN, unix.SYS_FSPICK,
	unix.SYS_GET_MEMPOLICY, unix.SYS_MBIND, unix.SYS_MIGRATE_PAGES, unix.SYS_MOVE_PAGES, unix.SYS_SET_MEMPOLICY, unix.SYS_SET_MEMPOLICY_HOME_NODE,
	unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER, unix.SYS_IO_URING_SETUP,
	unix.SYS_KCMP, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_KEXEC_LOAD, unix.SYS_KEYCTL, unix.SYS_REQUEST_KEY,
	unix.SYS_LOOKUP_DCOOKIE, unix.SYS_MOUNT, unix.SYS_MOUNT_SETATTR, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_PIVOT_ROOT, unix.SYS_UMOUNT2,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NFSSERVCTL,
	unix.SYS_PERF_EVENT_OPEN, unix.SYS_PIDFD_GETFD, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_REBOOT, unix.SYS_SETNS, unix.SYS_SETTIMEOFDAY,
	unix.SYS_SWAPOFF, unix.SYS_SWAPON, unix.SYS_SYSLOG, unix.SYS_USERFAULTFD,
}, archDenied...)

// namespaceFlags are the clone and unshare flags that make a namespace.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// ptrace requests that take hold of a running process.
const (
	ptraceAttach = 16     // PTRACE_ATTACH
	ptraceSeize  = 0x4206 // PTRACE_SEIZE
)

// Offsets in struct seccomp_data: the call's number, its architecture, and
// the low 32 bits of its first argument (little-endian: both supported
// architectures are).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
)

// seccompFilter returns the jail's filter program, or nil on an
// architecture it is not written for.
func seccompFilter() ([]unix.SockFilter, error) {
	if seccompArch == 0 {
		return nil, nil
	}
	var a bpfAsm
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, seccompArch, "", "deny")
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	if seccompFlagABI != 0 {
		a.jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, seccompFlagABI, "deny", "")
	}
	for _, nr := range deniedSyscalls {
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, "deny", "")
	}
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.SYS_CLONE, "flags", "")
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.SYS_UNSHARE, "flags", "")
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.SYS_CLONE3, "enosys", "")
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.SYS_PTRACE, "ptrace", "allow")

	a.label("flags")
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
	a.jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, namespaceFlags, "deny", "allow")

	a.label("ptrace")
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, ptraceAttach, "deny", "")
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, ptraceSeize, "deny", "allow")

	a.label("allow")
	a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	a.label("deny")
	a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	a.label("enosys")
	a.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	return a.assemble()
}

// jailFilter returns the bubblewrap arguments that load the jail's filter
// and the pipe to hand the jail's wrapper as its descriptor seccompFD (the
// caller closes it once the wrapper started); none of either on an
// architecture without a filter.
func jailFilter() ([]string, *os.File, error) {
	prog, err := seccompFilter()
	if err != nil || prog == nil {
		return nil, nil, err
	}
	buf := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		buf = binary.NativeEndian.AppendUint16(buf, ins.Code)
		buf = append(buf, ins.Jt, ins.Jf)
		buf = binary.NativeEndian.AppendUint32(buf, ins.K)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp filter: %w", err)
	}
	defer w.Close()
	// The program (a few hundred bytes) fits the pipe's buffer: the write
	// does not wait for bubblewrap.
	if _, err := w.Write(buf); err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return []string{"--seccomp", strconv.Itoa(seccompFD)}, r, nil
}

// bpfAsm assembles a classic BPF program whose jumps name labels; "" is
// the next instruction.
type bpfAsm struct {
	prog   []unix.SockFilter
	labels map[string]int
	jumps  []bpfJump
}

type bpfJump struct {
	at     int
	jt, jf string
}

func (a *bpfAsm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *bpfAsm) jump(code uint16, k uint32, jt, jf string) {
	a.jumps = append(a.jumps, bpfJump{at: len(a.prog), jt: jt, jf: jf})
	a.stmt(code, k)
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

// assemble resolves the jumps: each is forward, at most 255 instructions.
func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	offset := func(from int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok {
			return 0, fmt.Errorf("seccomp filter: no label %q", label)
		}
		d := to - from - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp filter: jump to %q is %d instructions", label, d)
		}
		return uint8(d), nil
	}
	for _, j := range a.jumps {
		var err error
		if a.prog[j.at].Jt, err = offset(j.at, j.jt); err != nil {
			return nil, err
		}
		if a.prog[j.at].Jf, err = offset(j.at, j.jf); err != nil {
			return nil, err
		}
	}
	return a.prog, nil
}
