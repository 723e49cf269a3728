//go:build linux && !amd64 && !arm64

package local

// No filter is written for this architecture: jails run without one.
const (
	seccompArch    = 0
	seccompFlagABI = 0
)

var archDenied []uint32
