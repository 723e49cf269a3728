// Package cgroupacct reads the CPU time a sandbox has used from its control
// group on the host (cgroup v1 cpuacct or cgroup v2 cpu.stat). It counts
// every process of the sandbox — its agent, commands, what they left
// running — and under gVisor the application kernel serving them; it is
// what the sandbox backends report for metering a sandbox's life.
package cgroupacct

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU is the CPU accounting file of one control group: the cgroup v1
// cpuacct.usage (nanoseconds) or the cgroup v2 cpu.stat (usage_usec). The
// zero CPU is unknown.
type CPU struct {
	Path string // the counter file; empty when unknown
	V2   bool   // Path is a cgroup v2 cpu.stat
}

// ForProcess locates the CPU accounting of process pid's control group
// under the cgroup mount cgroupRoot (usually /sys/fs/cgroup); the zero CPU
// when there is none.
func ForProcess(pid int, cgroupRoot string) CPU {
	if pid <= 0 {
		return CPU{}
	}
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return CPU{}
	}
	defer f.Close()
	var v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpuacct" {
				p := filepath.Join(cgroupRoot, "cpuacct", parts[2], "cpuacct.usage")
				if _, err := os.Stat(p); err == nil {
					return CPU{Path: p}
				}
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	if v2 != "" {
		for _, root := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
			p := filepath.Join(root, v2, "cpu.stat")
			if _, err := os.Stat(p); err == nil {
				return CPU{Path: p, V2: true}
			}
		}
	}
	return CPU{}
}

// Read returns the CPU time the group has used, and false when it cannot
// be read (unknown, or the group is gone).
func (c CPU) Read() (time.Duration, bool) {
	if c.Path == "" {
		return 0, false
	}
	data, err := os.ReadFile(c.Path)
	if err != nil {
		return 0, false
	}
	return parseCPU(string(data), c.V2)
}

// parseCPU reads cpuacct.usage (v1, nanoseconds) or the usage_usec line of
// cpu.stat (v2).
func parseCPU(s string, v2 bool) (time.Duration, bool) {
	if !v2 {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return time.Duration(n), err == nil
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "usage_usec" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return time.Duration(n) * time.Microsecond, err == nil
		}
	}
	return 0, false
}
