package cgroupacct

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// OOM is the oom_kill counter of a sandbox's memory cgroup, read from the
// host: the cgroup v1 memory.oom_control or the cgroup v2 memory.events.
// It tells a command (or a whole sandbox) killed for memory from one
// killed otherwise, whatever the agent can see inside. The zero OOM is
// unknown.
type OOM struct {
	Path string // the counter file; empty when unknown
}

// OOMForProcess locates the memory cgroup counter of process pid under the
// cgroup mount cgroupRoot; the zero OOM when there is none.
func OOMForProcess(pid int, cgroupRoot string) OOM {
	v1, v2, ok := Groups(pid)
	if !ok {
		return OOM{}
	}
	if g, ok := v1["memory"]; ok {
		if o, ok := oomAt(filepath.Join(cgroupRoot, "memory", g, "memory.oom_control")); ok {
			return o
		}
	}
	if v2 != "" {
		for _, dir := range V2Dirs(cgroupRoot, v2) {
			if o, ok := oomAt(filepath.Join(dir, "memory.events")); ok {
				return o
			}
		}
	}
	return OOM{}
}

// At locates the CPU accounting and the OOM counter of the control group
// path (as an OCI runtime's cgroupsPath names it) under cgroupRoot, on
// either cgroup version; zero values for what is not there.
func At(cgroupRoot, path string) (CPU, OOM) {
	var cpu CPU
	var oom OOM
	for _, p := range []string{filepath.Join(cgroupRoot, "cpuacct", path, "cpuacct.usage"), filepath.Join(cgroupRoot, "cpu,cpuacct", path, "cpuacct.usage")} {
		if _, err := os.Stat(p); err == nil {
			cpu = CPU{Path: p}
			break
		}
	}
	if o, ok := oomAt(filepath.Join(cgroupRoot, "memory", path, "memory.oom_control")); ok {
		oom = o
	}
	for _, dir := range V2Dirs(cgroupRoot, path) {
		if cpu.Path == "" {
			if p := filepath.Join(dir, "cpu.stat"); exists(p) {
				cpu = CPU{Path: p, V2: true}
			}
		}
		if oom.Path == "" {
			if o, ok := oomAt(filepath.Join(dir, "memory.events")); ok {
				oom = o
			}
		}
	}
	return cpu, oom
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func oomAt(p string) (OOM, bool) {
	if !exists(p) {
		return OOM{}, false
	}
	return OOM{Path: p}, true
}

// Read returns the oom_kill counter, and false when it cannot be read.
// It is read before every command, so it takes three system calls (open,
// read, close) where os.ReadFile takes ten on a control group file (the
// runtime's poller tries and gives up on it, and the size is asked for).
func (o OOM) Read() (int64, bool) {
	if o.Path == "" {
		return 0, false
	}
	fd, err := syscall.Open(o.Path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer syscall.Close(fd)
	// memory.oom_control and memory.events are well under 1 KiB.
	var buf [1024]byte
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, false
		}
		if m == 0 {
			break
		}
		n += m
	}
	return parseOOMKill(string(buf[:n]))
}

// parseOOMKill finds the "oom_kill N" line of memory.oom_control or memory.events.
func parseOOMKill(s string) (int64, bool) { return parseCount(s, "oom_kill") }

// parseCount finds the "key N" line of a cgroup's flat keyed file.
func parseCount(s, key string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
