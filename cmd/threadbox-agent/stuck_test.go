package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// TestGroupStates: the processes of one group are described with their
// names, states and what they wait in, read from a proc file system.
func TestGroupStates(t *testing.T) {
	root := t.TempDir()
	put := func(pid, stat, wchan string) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		must(t, os.WriteFile(filepath.Join(root, pid, "stat"), []byte(stat), 0o644))
		if wchan != "" {
			must(t, os.WriteFile(filepath.Join(root, pid, "wchan"), []byte(wchan), 0o644))
		}
	}
	put("120", "120 (bash) S 1 120 120 0 -1", "do_wait")
	put("121", "121 (cat) D 120 120 120 0 -1", "fuse_simple_request")
	put("122", "122 (a (b) c) R 120 120 120 0 -1", "0")
	put("130", "130 (other) S 1 130 130 0 -1", "do_wait")
	must(t, os.MkdirAll(filepath.Join(root, "self"), 0o755))
	tests := []struct {
		pgid int
		want string
	}{
		{120, "120 (bash) S in do_wait; 121 (cat) D in fuse_simple_request; 122 (a (b) c) R"},
		{130, "130 (other) S in do_wait"},
		{999, "none"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.pgid), func(t *testing.T) {
			if got := groupStates(root, tt.pgid); got != tt.want {
				t.Errorf("groupStates(%d) = %q, want %q", tt.pgid, got, tt.want)
			}
		})
	}

	// A real group on this host.
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	// Once it went to sleep (it runs for a moment after its start).
	want := fmt.Sprintf("%d (sleep) S", pid)
	got := groupStates("/proc", pid)
	for deadline := time.Now().Add(5 * time.Second); !strings.HasPrefix(got, want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		got = groupStates("/proc", pid)
	}
	if !strings.HasPrefix(got, want) {
		t.Errorf("groupStates of a sleeping command = %q, want it to start with %q", got, want)
	}
}

// TestLogStuck: a timed-out command that has not ended is logged with
// where its end is; one that ended is not.
func TestLogStuck(t *testing.T) {
	var buf bytes.Buffer
	s := &server{log: slog.New(slog.NewTextHandler(&buf, nil))}
	p := &proc{s: s, id: 7, pid: 999999999}
	p.stage.Store("collecting its output files")
	p.logStuck()
	if got := buf.String(); !strings.Contains(got, "timed-out command not ended") ||
		!strings.Contains(got, `stage="collecting its output files"`) || !strings.Contains(got, "group=none") {
		t.Errorf("log of a stuck command: %q", got)
	}
	buf.Reset()
	p.stage.Store("ended")
	p.logStuck()
	if buf.Len() != 0 {
		t.Errorf("a command that ended was logged: %q", buf.String())
	}
}

// TestLogStuckExitNotSent: a timed-out command whose exit could not be
// sent is logged with the reason.
func TestLogStuckExitNotSent(t *testing.T) {
	var buf bytes.Buffer
	s := &server{log: slog.New(slog.NewTextHandler(&buf, nil)), gen: 2}
	p := &proc{s: s, id: 9, pid: 999999999, gen: 1}
	if why := s.sendExit(p, protocol.Exit{}); why != "its connection ended" {
		t.Fatalf("sendExit of a command of an ended connection: %q", why)
	}
	p.stage.Store("exit not sent: its connection ended")
	p.logStuck()
	if got := buf.String(); !strings.Contains(got, `stage="exit not sent: its connection ended"`) {
		t.Errorf("log of a command whose exit was not sent: %q", got)
	}
}

// TestReadProcs: the stat of each process is read for its name (which may
// hold spaces and parentheses), state, parent and group; an entry that is
// not a process or whose stat does not parse is left out, and a real child
// of this process is found with its parent (what the relay's killChildren
// picks its targets by) and its own group.
func TestReadProcs(t *testing.T) {
	root := t.TempDir()
	put := func(pid, stat string) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		must(t, os.WriteFile(filepath.Join(root, pid, "stat"), []byte(stat), 0o644))
	}
	put("7", "7 (a) b) S 1 7 7 0 -1")
	put("8", "8 (torn")
	put("9", "9 (short) S 1")
	put("self", "1 (not a pid) S 0 1 1")
	got := readProcs(root)
	want := []procStat{{pid: 7, name: "(a) b)", state: "S", ppid: 1, pgrp: 7}}
	if !slices.Equal(got, want) {
		t.Errorf("readProcs = %+v, want %+v", got, want)
	}

	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	procs := readProcs("/proc")
	i := slices.IndexFunc(procs, func(p procStat) bool { return p.pid == pid })
	if i < 0 {
		t.Fatalf("the child %d is not listed", pid)
	}
	if p := procs[i]; p.ppid != os.Getpid() || p.pgrp != pid {
		t.Errorf("the child read as %+v, want parent %d and group %d", p, os.Getpid(), pid)
	}
}
