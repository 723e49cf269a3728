package local

import "golang.org/x/sys/unix"

// The filter's architecture; arm64 has no second system call ABI.
const (
	seccompArch    = unix.AUDIT_ARCH_AARCH64
	seccompFlagABI = 0
)

// archDenied are the denied calls that only arm64 has: none.
var archDenied []uint32
