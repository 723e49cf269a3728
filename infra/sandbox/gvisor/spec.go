package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
)

// The parts of the OCI runtime specification (config.json) a sandbox's
// bundle sets; runsc reads nothing else of it here.
type (
	ociSpec struct {
		Version     string            `json:"ociVersion"`
		Process     ociProcess        `json:"process"`
		Root        ociRoot           `json:"root"`
		Hostname    string            `json:"hostname"`
		Mounts      []ociMount        `json:"mounts"`
		Linux       ociLinux          `json:"linux"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	ociProcess struct {
		User            ociUser   `json:"user"`
		Args            []string  `json:"args"`
		Env             []string  `json:"env"`
		Cwd             string    `json:"cwd"`
		Capabilities    ociCaps   `json:"capabilities"`
		Rlimits         []ociRlim `json:"rlimits"`
		NoNewPrivileges bool      `json:"noNewPrivileges"`
	}
	ociUser struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	ociCaps struct {
		Bounding  []string `json:"bounding"`
		Effective []string `json:"effective"`
		Permitted []string `json:"permitted"`
	}
	ociRlim struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces  []ociNamespace `json:"namespaces"`
		Resources   ociResources   `json:"resources"`
		CgroupsPath string         `json:"cgroupsPath"`
	}
	ociNamespace struct {
		Type string `json:"type"`
	}
	ociResources struct {
		Memory ociMemory `json:"memory"`
		CPU    ociCPU    `json:"cpu"`
		Pids   ociPids   `json:"pids"`
	}
	ociMemory struct {
		Limit int64 `json:"limit"`
		Swap  int64 `json:"swap"`
	}
	ociCPU struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	}
	ociPids struct {
		Limit int64 `json:"limit"`
	}
)

// annotationContainer names the container id a runsc container serves, so
// that Reconcile can tell whose it is.
const annotationContainer = "threadbox.container"

// agentCaps are the agent's powers over the commands it runs as the
// sandbox user: becoming it, killing its processes, handing it the folders
// it makes and cleaning them up. Commands lose them with the uid. Under
// gVisor the sandbox's root is the application kernel's, not the host's.
var agentCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE"}

// sandboxPath is PATH inside the sandbox.
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// bundleSpec builds the OCI configuration of one sandbox: the root
// filesystem read-only, /tmp a tmpfs of the limit's size, the agent bound
// read-only at sandbox.AgentPath as init (running as the sandbox's root, its
// commands as the sandbox user), spec.Mounts bound in, no network but
// loopback (runsc's --network=none), and the limits in cgroupsPath.
// spec.Mounts under /home/agent and /mnt reach the sandbox through the
// view (view.go), whose parents are bound there; others are bound alone.
func (b *Backend) bundleSpec(spec sandbox.Spec, l sandbox.Limits, cgroupsPath, view string) ociSpec {
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(l.TmpBytes, 10)}},
		{Destination: sandbox.AgentPath, Type: "bind", Source: b.cfg.AgentBin, Options: []string{"rbind", "ro"}},
	}
	if b.cfg.TrustDir != "" {
		mounts = append(mounts, ociMount{Destination: boxes.TrustPath, Type: "bind", Source: b.cfg.TrustDir, Options: []string{"rbind", "ro"}})
	}
	for _, p := range viewParents {
		// Read-write here: the view is read-only on the host, and the
		// folders bound under it there keep their own flags.
		mounts = append(mounts, ociMount{Destination: p.target, Type: "bind", Source: filepath.Join(view, p.name), Options: []string{"rbind", "rw"}})
	}
	for _, m := range spec.Mounts {
		if place(view, m.Target) != "" {
			continue
		}
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		mounts = append(mounts, ociMount{Destination: m.Target, Type: "bind", Source: m.Source, Options: []string{"rbind", opt}})
	}
	return ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			User: ociUser{UID: 0, GID: 0},
			Args: []string{sandbox.AgentPath},
			Env:  b.sandboxEnv(spec),
			// Not a folder a claim binds over: the agent's would stay the
			// one it started in, which a checkpoint cannot save. Commands
			// run in the workspace by its path.
			Cwd:             "/",
			Capabilities:    ociCaps{Bounding: agentCaps, Effective: agentCaps, Permitted: agentCaps},
			Rlimits:         []ociRlim{{Type: "RLIMIT_NOFILE", Hard: uint64(l.NoFile), Soft: uint64(l.NoFile)}},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: b.rootfs, Readonly: true},
		Hostname: "sandbox",
		Mounts:   mounts,
		Linux: ociLinux{
			Namespaces: []ociNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			Resources: ociResources{
				Memory: ociMemory{Limit: l.MemoryBytes, Swap: l.MemoryBytes},
				CPU:    ociCPU{Quota: l.CPUQuotaMicros(), Period: sandbox.CPUPeriodMicros},
				Pids:   ociPids{Limit: l.Pids},
			},
			CgroupsPath: cgroupsPath,
		},
		Annotations: map[string]string{annotationContainer: spec.ID, annotationOwner: b.self.String()},
	}
}

// sandboxEnv is the environment of the agent and so of every command.
func (b *Backend) sandboxEnv(spec sandbox.Spec) []string {
	env := []string{
		"PATH=" + sandboxPath,
		"HOME=/home/agent", "USER=agent", "LOGNAME=agent", "SHELL=/bin/bash", "LANG=C.UTF-8",
		// The host reads the sandbox's OOM counter; the agent cannot see it.
		"THREADBOX_AGENT_OOM_EVENTS=/nonexistent",
		fmt.Sprintf("THREADBOX_AGENT_RUN_AS=%d:%d", hostdirs.SandboxUID, hostdirs.SandboxGID),
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" && !strings.HasPrefix(k, "THREADBOX_AGENT_") {
			env = append(env, kv)
		}
	}
	if b.cfg.TrustDir != "" {
		env = append(env, boxes.TrustEnv()...)
	}
	return env
}

// writeBundle writes the bundle folder dir with spec's config.json.
func writeBundle(dir string, spec ociSpec) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}
