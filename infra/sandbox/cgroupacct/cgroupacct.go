// Package cgroupacct finds a sandbox's control groups on the host and
// reads the CPU time it has used from them (cgroup v1 cpuacct or cgroup v2
// cpu.stat), and how often its memory cgroup killed for memory (OOM). It
// counts every process of the sandbox — its agent, commands, what they
// left running — and under gVisor the application kernel serving them; it
// is what the sandbox backends report for metering a sandbox's life.
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

// Groups reads the control groups of process pid: the path of each cgroup
// v1 controller ("memory", "cpuacct", ...) and the cgroup v2 path ("" when
// none); false when they cannot be read.
func Groups(pid int) (v1 map[string]string, v2 string, ok bool) {
	if pid <= 0 {
		return nil, "", false
	}
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, "", false
	}
	defer f.Close()
	v1 = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				v1[c] = parts[2]
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	return v1, v2, true
}

// V2Dirs are the folders a cgroup v2 path may be under cgroupRoot: the
// unified hierarchy mounted there, or beside v1 at "unified".
func V2Dirs(cgroupRoot, path string) []string {
	return []string{filepath.Join(cgroupRoot, path), filepath.Join(cgroupRoot, "unified", path)}
}

// ForProcess locates the CPU accounting of process pid's control group
// under the cgroup mount cgroupRoot (usually /sys/fs/cgroup); the zero CPU
// when there is none.
func ForProcess(pid int, cgroupRoot string) CPU {
	v1, v2, ok := Groups(pid)
	if !ok {
		return CPU{}
	}
	if g, ok := v1["cpuacct"]; ok {
		p := filepath.Join(cgroupRoot, "cpuacct", g, "cpuacct.usage")
		if _, err := os.Stat(p); err == nil {
			return CPU{Path: p}
		}
	}
	if v2 != "" {
		for _, dir := range V2Dirs(cgroupRoot, v2) {
			p := filepath.Join(dir, "cpu.stat")
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
