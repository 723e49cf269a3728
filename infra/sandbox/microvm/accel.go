package microvm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The accelerators a VM runs on.
const (
	AccelKVM = "kvm" // hardware virtualisation through /dev/kvm (or PVM's)
	AccelTCG = "tcg" // QEMU's software CPU: emulation, tens of times slower
)

// tcgCPU is the CPU QEMU's software CPU shows the guest: the x86-64
// baseline with the kernel's hardening features (SMEP, SMAP, UMIP), RDRAND
// and FSGSBASE. QEMU's "max" offers every extension it can emulate, and
// the guest then takes the AVX paths of its kernel, C library and
// programs, which the software CPU emulates at great cost. On the
// baseline's SSE2 paths, in four alternating runs of each, a warm VM's
// restore to its first command took 0.72 s against 0.91 s, a checkpoint's
// 0.49 s against 0.59 s and a warm command 15 ms against 21 ms (medians;
// docs/microvm.md).
const tcgCPU = "qemu64,+smep,+smap,+umip,+rdrand,+fsgsbase"

// cpuModel is QEMU's -cpu for accel: the host's own under KVM, tcgCPU
// emulated. A VM saved with one model restores only with the same, so
// templates and checkpoints record it.
func cpuModel(accel string) string {
	if accel == AccelTCG {
		return tcgCPU
	}
	return "host"
}

// kvmGetAPIVersion is the ioctl KVM_GET_API_VERSION; every KVM answers 12.
const kvmGetAPIVersion = 0xAE00

// accelHost is what the host offers for the accelerator choice; tests
// fake it.
type accelHost struct {
	kvmDev string // /dev/kvm
	pvmMod string // /sys/module/kvm_pvm: the host's KVM is PVM
}

var defaultAccelHost = accelHost{kvmDev: "/dev/kvm", pvmMod: "/sys/module/kvm_pvm"}

// chooseAccel decides the accelerator from the setting (MICROVM_ACCEL:
// "" picks KVM when it can run the guest kernel, "kvm" insists on it,
// "tcg" asks for emulation) and whether the operator supplied the guest
// kernel. With no usable accelerator the error says why: emulation is
// never chosen silently.
func chooseAccel(setting string, ownKernel bool, h accelHost) (string, error) {
	switch setting {
	case AccelTCG:
		return AccelTCG, nil
	case "", "auto", AccelKVM:
	default:
		return "", fmt.Errorf("MICROVM_ACCEL=%q is not kvm or tcg", setting)
	}
	if err := openKVM(h.kvmDev); err != nil {
		return "", fmt.Errorf("no usable accelerator: %w; MICROVM_ACCEL=tcg runs the VMs emulated (tens of times slower)", err)
	}
	if _, err := os.Stat(h.pvmMod); err == nil && !ownKernel && setting != AccelKVM {
		return "", errors.New("no usable accelerator: this host's KVM is PVM (software nested virtualisation, no VT-x/AMD-V), which runs only guest kernels built for PVM and fails on the stock one; set MICROVM_KERNEL to a PVM guest kernel (docs/microvm.md), or MICROVM_ACCEL=tcg to run the VMs emulated (tens of times slower)")
	}
	return AccelKVM, nil
}

// openKVM checks that dev opens and answers KVM's API version.
func openKVM(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("%s: KVM_GET_API_VERSION: %w", dev, err)
	}
	if v != 12 {
		return fmt.Errorf("%s: KVM API version %d, want 12", dev, v)
	}
	return nil
}

// hostTSC reads the host's TSC rate and whether it is invariant (it
// ticks at one rate on every CPU, in every power state) from
// /proc/cpuinfo. QEMU's software CPU reads the host's TSC, and the guest
// kernel, which cannot calibrate it without a PIT, is told the rate
// (tsc_early_khz).
func hostTSC() (khz int64, invariant bool) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return parseCPUInfo(f)
}

// parseCPUInfo reads the first CPU's "cpu MHz" and "flags" lines of a
// /proc/cpuinfo.
func parseCPUInfo(r io.Reader) (khz int64, invariant bool) {
	var mhz, flags bool
	sc := bufio.NewScanner(r)
	for sc.Scan() && !(mhz && flags) {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "cpu MHz":
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 && !mhz {
				khz, mhz = int64(f*1000), true
			}
		case "flags":
			if !flags {
				have := strings.Fields(v)
				invariant = slices.Contains(have, "tsc_reliable") ||
					slices.Contains(have, "constant_tsc") && slices.Contains(have, "nonstop_tsc")
				flags = true
			}
		}
	}
	return khz, invariant
}
