package local

import "golang.org/x/sys/unix"

// The filter's architecture, and the bit of an x32 system call number: the
// i386 ABI (int 0x80) reports another architecture and x32 sets the bit;
// both are denied whole, as their numbers differ.
const (
	seccompArch    = unix.AUDIT_ARCH_X86_64
	seccompFlagABI = 0x40000000
)

// archDenied are the denied calls that only x86-64 has: port I/O, the
// local descriptor table, and old module, sysctl and filesystem calls.
var archDenied = []uint32{
	unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_IOPERM, unix.SYS_IOPL, unix.SYS_MODIFY_LDT,
	unix.SYS_QUERY_MODULE, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_USELIB, unix.SYS_USTAT,
}
