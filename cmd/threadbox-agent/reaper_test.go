package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestReaperDeliversAnEarlyExit: the spawn runs without the reaper's lock,
// so a command may be reaped before start registers its pid; start then
// hands it the status reaped since its spawn began, and a status reaped
// before that (an orphan that had the pid earlier) is never taken for it.
func TestReaperDeliversAnEarlyExit(t *testing.T) {
	r := newReaper(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var cmd *exec.Cmd
	pid, ch, err := r.start(func() (int, error) {
		cmd = exec.Command("sh", "-c", "exit 7")
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		// Wait until it is a zombie, then reap it before start registers it.
		deadline := time.Now().Add(10 * time.Second)
		for !zombie(cmd.Process.Pid) {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("child %d never exited", cmd.Process.Pid)
			}
			time.Sleep(time.Millisecond)
		}
		r.reap()
		return cmd.Process.Pid, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Release()
	select {
	case ex := <-ch:
		if ex.status.ExitStatus() != 7 {
			t.Fatalf("pid %d: exit status %d, want 7", pid, ex.status.ExitStatus())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the status of a command reaped before its registration was lost")
	}
	if len(r.early) != 0 || r.orphans != 0 {
		t.Fatalf("early %v, orphans %d after the command took its status", r.early, r.orphans)
	}

	// A status reaped before the spawn began is an earlier process's.
	r.early[424242] = earlyExit{seq: r.seq, at: time.Now()}
	_, ch, err = r.start(func() (int, error) { return 424242, nil })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-ch:
		t.Fatalf("a stale status was handed to a new command: %v", ex.status)
	default:
	}
	if _, ok := r.waiting[424242]; !ok {
		t.Fatal("the new command is not registered")
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}
