package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procStat is what the agent reads of a process in /proc/<pid>/stat.
type procStat struct {
	pid        int
	name       string // the command's name, in its parentheses
	state      string // R, S, D, Z…
	ppid, pgrp int
}

// readProcs lists the processes of the proc file system at root (those
// that end while it reads are left out).
func readProcs(root string) []procStat {
	entries, _ := os.ReadDir(root)
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The name (field 2) is in parentheses and may hold spaces and
		// parentheses; the state, parent and group follow the last ')'.
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 3 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, procStat{pid: pid, name: s[open : end+1], state: f[0], ppid: ppid, pgrp: pgrp})
	}
	return out
}
