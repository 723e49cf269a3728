package maketest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaveTest is a test of the small module's that leaves a process behind
// (started and never waited for, with no output pipe to hold) and, once it
// has, asks the shell that started scripts/test.sh to start a process of
// its own, and waits until it has: one that is not the run's but is
// started while the run is under way.
const leaveTest = `package leave

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestLeave(t *testing.T) {
	dir := os.Getenv("LEAVE_DIR")
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "left.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "start"), []byte("start\n"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(dir, "started")); err != nil {
		t.Fatal(err)
	}
}
`

// callingShell stands for a developer's terminal: a shell leading a
// session of its own that starts scripts/test.sh and, while the run is
// under way (when the run's test asks), a long-lived process of its own,
// as an editor does. $1 is the folder of the pipes and the pid files.
const callingShell = `set -e
{
  read -r _ < "$1/start"
  sleep 1000 </dev/null >/dev/null 2>&1 &
  echo $! > "$1/unrelated.pid"
  echo started > "$1/started"
} </dev/null >/dev/null 2>&1 &
./scripts/test.sh -run '^TestLeave$' || echo "test.sh: exit status $?"
`

// TestTestShReportsTheRunsLeftoversOnly: scripts/test.sh, started from a
// shell whose session holds other processes, reports the process a test
// left behind and not the process the calling shell started meanwhile.
// The small module it runs has the checkout's scripts/test.sh and
// scripts/leaks.sh, every package test.sh names (empty but one, whose
// test leaves a sleep behind), and a Makefile whose sandbox-image does
// nothing; the services test.sh would start are set as already there.
func TestTestShReportsTheRunsLeftoversOnly(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatal("scripts/test.sh needs setsid (util-linux), which is not in PATH")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":               "module threadbox\n\n" + goDirective(t) + "\n",
		"Makefile":             "sandbox-image:\n\t@true\n",
		"leave/doc.go":         "// Package leave has a test that leaves a process behind.\npackage leave\n",
		"leave/leave_test.go":  leaveTest,
		"cmd/threadbox/doc.go": "// Package threadbox is empty.\npackage threadbox\n",
		// The npm packages test.sh installs when they are missing.
		"cmd/threadbox/testdata/tssdk/node_modules/@anthropic-ai/sdk/package.json":              "{}\n",
		"cmd/threadbox/testdata/mcpclients/node_modules/@anthropic-ai/claude-code/package.json": "{}\n",
		"infra/c2pa/testdata/c2pa/node_modules/@contentauth/c2pa-wasm/package.json":             "{}\n",
	}
	for _, p := range []string{"infra/sandbox/docker", "infra/sandbox/gvisor", "infra/sandbox/kubernetes", "infra/sandbox/microvm", "infra/sandbox/local", "cmd/threadbox-soak"} {
		name := filepath.Base(p)
		files[p+"/doc.go"] = "// Package " + name + " is empty.\npackage " + strings.ReplaceAll(name, "-", "") + "\n"
	}
	write(t, dir, files)
	copyFile(t, dir, "scripts/test.sh")
	copyFile(t, dir, "scripts/leaks.sh")
	pipes := t.TempDir()
	for _, name := range []string{"start", "started"} {
		if err := syscall.Mkfifo(filepath.Join(pipes, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Both sleeps are ended here, by pid, whatever the run did.
	t.Cleanup(func() {
		for _, name := range []string{"left.pid", "unrelated.pid"} {
			if pid, err := readPid(filepath.Join(pipes, name)); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", callingShell, "bash", pipes)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The shell leads its session and group: a run that does not end in
	// time ends with all of them.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(os.Environ(),
		"LEAVE_DIR="+pipes,
		"TEST_DATABASE_URL=postgres://unused",
		"TEST_BLOB_URL=http://unused",
		"THREADBOX_K8S=off",
		"GOFLAGS=",
		"GOWORK=off",
	)
	out, err := cmd.CombinedOutput()
	// What is left of the shell's group (a process still waiting for the
	// run's test when the run did not get to it) ends here.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("the calling shell: %v\n%s", err, out)
	}
	left, err := readPid(filepath.Join(pipes, "left.pid"))
	if err != nil {
		t.Fatalf("the run's test left no pid: %v\n%s", err, out)
	}
	unrelated, err := readPid(filepath.Join(pipes, "unrelated.pid"))
	if err != nil {
		t.Fatalf("the calling shell started no process: %v\n%s", err, out)
	}
	reported := func(pid int) bool {
		return strings.Contains(string(out), "process "+strconv.Itoa(pid)+"@")
	}
	if !reported(left) {
		t.Errorf("test.sh did not report the sleep the run left behind (pid %d):\n%s", left, out)
	}
	if reported(unrelated) {
		t.Errorf("test.sh reported the calling shell's own sleep (pid %d) as the run's:\n%s", unrelated, out)
	}
}

// readPid reads a pid written to the file name.
func readPid(name string) (int, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
