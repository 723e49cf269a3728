package main

import (
	"context"
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

// TestReaperLoopSleepsWhenIdle: an idle agent's reaper waits for signals
// alone; a command's start arms its safety reap, which collects a status
// whose SIGCHLD never came, and which goes on for idleAfter after the
// last start and then stops.
func TestReaperLoopSleepsWhenIdle(t *testing.T) {
	// No signal.Notify: no SIGCHLD ever reaches this reaper, as if every
	// one were lost.
	r := &reaper{log: slog.New(slog.NewTextHandler(io.Discard, nil)), sig: make(chan os.Signal, 1), kick: make(chan struct{}, 1),
		every: 10 * time.Millisecond, idleAfter: 200 * time.Millisecond, waiting: map[int]chan exited{}, early: map[int]earlyExit{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.loop(ctx)

	// Longer than the second the loop once reaped every: an idle
	// sandbox's agent then woke once a second, however long it idled.
	time.Sleep(1200 * time.Millisecond)
	if n := r.wakes.Load(); n != 0 {
		t.Fatalf("an idle reaper woke %d times", n)
	}
	_, ch, err := r.start(func() (int, error) {
		cmd := exec.Command("sh", "-c", "exit 3")
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		pid := cmd.Process.Pid
		_ = cmd.Process.Release()
		return pid, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-ch:
		if ex.status.ExitStatus() != 3 {
			t.Fatalf("exit status %d, want 3", ex.status.ExitStatus())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a command whose SIGCHLD never came was not reaped")
	}
	// Armed until idleAfter has passed since the start, then asleep.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		armed := r.armed
		r.mu.Unlock()
		if !armed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reaper's safety reap was still armed long after the last command")
		}
		time.Sleep(10 * time.Millisecond)
	}
	woke := r.wakes.Load()
	time.Sleep(100 * time.Millisecond)
	if n := r.wakes.Load() - woke; n != 0 {
		t.Fatalf("the reaper woke %d times once idle again", n)
	}
}
