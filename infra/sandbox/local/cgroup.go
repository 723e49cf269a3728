package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/cgroupacct"
	"threadbox/infra/sandbox/hostdirs"
)

// v1Controllers are the cgroup v1 hierarchies a jail joins.
var v1Controllers = []string{"memory", "pids", "cpu"}

// acctHierarchy is the cgroup v1 hierarchy a jail also joins, for its CPU
// accounting, when it is mounted apart from cpu (it is often mounted with
// it, as cpu,cpuacct).
const acctHierarchy = "cpuacct"

// separateAcct reports whether the cgroup v1 cpuacct hierarchy under root
// exists apart from the cpu one.
func separateAcct(root string) bool {
	acct, err := filepath.EvalSymlinks(filepath.Join(root, acctHierarchy))
	if err != nil {
		return false
	}
	cpu, err := filepath.EvalSymlinks(filepath.Join(root, "cpu"))
	return err != nil || acct != cpu
}

// parentDir is the folder of this backend's cgroups inside one hierarchy.
func parentDir(hierarchy, instance string) string {
	return filepath.Join(hierarchy, "threadbox-local", hostdirs.SafeID(instance))
}

// detectMode finds out whether this process can make child cgroups (and
// makes their parent folders), falling back to rlimits with the reason.
func detectMode(cfg Config) (LimitMode, string) {
	if cfg.NoCgroups {
		return LimitRlimits, "cgroups disabled by configuration"
	}
	root := cfg.CgroupRoot
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		if err := prepareV2(root, cfg.Instance); err != nil {
			return LimitRlimits, "cgroup v2: " + err.Error()
		}
		return LimitCgroupV2, ""
	}
	for _, c := range v1Controllers {
		dir := parentDir(filepath.Join(root, c), cfg.Instance)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return LimitRlimits, "cgroup v1 " + c + ": " + err.Error()
		}
	}
	if separateAcct(root) {
		// Accounting only: without it a jail's CPU time is unknown.
		_ = os.MkdirAll(parentDir(filepath.Join(root, acctHierarchy), cfg.Instance), 0o755)
	}
	return LimitCgroupV1, ""
}

// prepareV2 makes the parent cgroup and delegates the memory, pids and cpu
// controllers down to it.
func prepareV2(root, instance string) error {
	dir := parentDir(root, instance)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for d := root; ; {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0o644); err != nil {
			return fmt.Errorf("enable controllers in %s: %w", d, err)
		}
		if d == dir {
			return nil
		}
		rel, _ := filepath.Rel(d, dir)
		d = filepath.Join(d, strings.Split(rel, string(filepath.Separator))[0])
	}
}

// removeParents deletes this instance's parent cgroups where they are empty.
func removeParents(cfg Config) {
	roots := []string{cfg.CgroupRoot}
	if _, err := os.Stat(filepath.Join(cfg.CgroupRoot, "cgroup.controllers")); err != nil {
		roots = roots[:0]
		for _, c := range v1Controllers {
			roots = append(roots, filepath.Join(cfg.CgroupRoot, c))
		}
		if separateAcct(cfg.CgroupRoot) {
			roots = append(roots, filepath.Join(cfg.CgroupRoot, acctHierarchy))
		}
	}
	for _, r := range roots {
		_ = os.Remove(parentDir(r, cfg.Instance))
	}
}

// cgroup is the set of cgroup folders of one jail. A nil *cgroup (rlimits)
// does nothing.
type cgroup struct {
	mode LimitMode
	dirs []string // one per v1 hierarchy, or the one v2 folder
	oom  string   // file holding the oom_kill counter
	cpu  cgroupacct.CPU
}

// newCgroup makes the jail's cgroups, writes its limits and lets uid join them.
func newCgroup(cfg Config, mode LimitMode, id string, l sandbox.Limits, uid int) (*cgroup, error) {
	name := fmt.Sprintf("%s-%d", hostdirs.SafeID(id), time.Now().UnixNano())
	cg := &cgroup{mode: mode}
	type setting struct{ file, value string }
	quota, period := l.CPUQuotaMicros(), strconv.Itoa(sandbox.CPUPeriodMicros)
	var plan map[string][]setting
	if mode == LimitCgroupV2 {
		dir := filepath.Join(parentDir(cfg.CgroupRoot, cfg.Instance), name)
		plan = map[string][]setting{dir: {
			{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)},
			{"memory.swap.max", "0"},
			{"pids.max", strconv.FormatInt(l.Pids, 10)},
			{"cpu.max", fmt.Sprintf("%d %s", quota, period)},
		}}
		cg.dirs = []string{dir}
		cg.oom = filepath.Join(dir, "memory.events")
		cg.cpu = cgroupacct.CPU{Path: filepath.Join(dir, "cpu.stat"), V2: true}
	} else {
		plan = map[string][]setting{}
		for _, c := range v1Controllers {
			dir := filepath.Join(parentDir(filepath.Join(cfg.CgroupRoot, c), cfg.Instance), name)
			cg.dirs = append(cg.dirs, dir)
			switch c {
			case "memory":
				plan[dir] = []setting{
					{"memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)},
					{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)},
				}
				cg.oom = filepath.Join(dir, "memory.oom_control")
			case "pids":
				plan[dir] = []setting{{"pids.max", strconv.FormatInt(l.Pids, 10)}}
			case "cpu":
				plan[dir] = []setting{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}}
				cg.cpu = cgroupacct.CPU{Path: filepath.Join(dir, "cpuacct.usage")} // when mounted as cpu,cpuacct
			}
		}
		if acct := filepath.Join(cfg.CgroupRoot, acctHierarchy); separateAcct(cfg.CgroupRoot) {
			if _, err := os.Stat(parentDir(acct, cfg.Instance)); err == nil {
				dir := filepath.Join(parentDir(acct, cfg.Instance), name)
				cg.dirs = append(cg.dirs, dir)
				cg.cpu = cgroupacct.CPU{Path: filepath.Join(dir, "cpuacct.usage")}
			}
		}
	}
	for _, dir := range cg.dirs {
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		for _, s := range plan[dir] {
			err := os.WriteFile(filepath.Join(dir, s.file), []byte(s.value), 0o644)
			// Swap accounting may be off: the memory limit still holds.
			if err != nil && !strings.Contains(s.file, "swap") && !strings.Contains(s.file, "memsw") {
				cg.remove()
				return nil, fmt.Errorf("cgroup: %s: %w", s.file, err)
			}
		}
		for _, f := range []string{"cgroup.procs", "tasks"} {
			err := os.Chown(filepath.Join(dir, f), uid, -1)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				cg.remove()
				return nil, fmt.Errorf("cgroup: delegate %s: %w", f, err)
			}
		}
	}
	return cg, nil
}

// procsFiles are the cgroup.procs files the jail's wrapper writes its pid to.
func (c *cgroup) procsFiles() []string {
	if c == nil {
		return nil
	}
	out := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// killAll sends SIGKILL to every process in the jail's cgroups.
func (c *cgroup) killAll() {
	if c == nil {
		return
	}
	for _, d := range c.dirs {
		if c.mode == LimitCgroupV2 {
			if os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644) == nil {
				continue
			}
		}
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove kills what is left and deletes the cgroups, retrying while the
// killed processes exit.
func (c *cgroup) remove() {
	if c == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range c.dirs {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				break
			}
			c.killAll()
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// cpuTime returns the CPU time the jail's processes have used, and false
// when unknown (rlimits, or no CPU accounting).
func (c *cgroup) cpuTime() (time.Duration, bool) {
	if c == nil {
		return 0, false
	}
	return c.cpu.Read()
}

// oomKills returns the jail's oom_kill counter, and false when unknown.
func (c *cgroup) oomKills() (int64, bool) {
	if c == nil || c.oom == "" {
		return 0, false
	}
	data, err := os.ReadFile(c.oom)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "oom_kill" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
