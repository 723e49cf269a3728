package docker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"threadbox/infra/sandbox/cgroupacct"
)

// oomCounter reads the oom_kill counter of a sandbox's memory cgroup from
// the host: the cgroup v1 memory.oom_control or the cgroup v2 memory.events
// of the container's init process. It lets Exec tell a command killed for
// memory from one killed otherwise, whatever the agent can see inside.
type oomCounter struct {
	path string // the counter file; empty when unknown
}

// newOOMCounter locates the memory cgroup counter of process pid.
func newOOMCounter(pid int, cgroupRoot string) oomCounter {
	v1, v2, ok := cgroupacct.Groups(pid)
	if !ok {
		return oomCounter{}
	}
	if g, ok := v1["memory"]; ok {
		p := filepath.Join(cgroupRoot, "memory", g, "memory.oom_control")
		if _, err := os.Stat(p); err == nil {
			return oomCounter{path: p}
		}
	}
	if v2 != "" {
		for _, dir := range cgroupacct.V2Dirs(cgroupRoot, v2) {
			p := filepath.Join(dir, "memory.events")
			if _, err := os.Stat(p); err == nil {
				return oomCounter{path: p}
			}
		}
	}
	return oomCounter{}
}

// read returns the oom_kill counter, and false when it cannot be read.
func (c oomCounter) read() (int64, bool) {
	if c.path == "" {
		return 0, false
	}
	data, err := os.ReadFile(c.path)
	if err != nil {
		return 0, false
	}
	return parseOOMKill(string(data))
}

// parseOOMKill finds the "oom_kill N" line of memory.oom_control or memory.events.
func parseOOMKill(s string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "oom_kill" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
